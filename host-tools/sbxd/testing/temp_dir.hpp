// For sbxd's unit tests: a temporary directory that is removed with its
// contents when the test ends, and a store opened in one.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd::testing {

class TempDir {
public:
    // PREFIX names the directory (mkdtemp(3) under $TMPDIR or /tmp).
    explicit TempDir(std::string_view prefix = "sbxd-test") {
        std::string templ =
            (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
        REQUIRE(::mkdtemp(templ.data()) != nullptr);
        path_ = templ;
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }

    [[nodiscard]] const std::string& path() const { return path_; }
    [[nodiscard]] std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }
    [[nodiscard]] std::string db() const { return file("sbxd.db"); }

private:
    std::string path_;
};

inline std::unique_ptr<Store> open_store(const std::string& path) {
    auto store = Store::open(path);
    REQUIRE_MESSAGE(store.has_value(), (store ? "" : store.error().to_string()));
    return std::move(*store);
}

}  // namespace sbx::sbxd::testing
