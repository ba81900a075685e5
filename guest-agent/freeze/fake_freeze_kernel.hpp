// A FreezeKernel for host tests: a mount table given as text and the
// frozen set in memory, so no test ever freezes the host's file systems.
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "guest-agent/freeze/freeze_kernel.hpp"
#include "guest-agent/protocol/messages.hpp"

namespace sbx::agent {

class FakeFreezeKernel final : public FreezeKernel {
public:
    Result<std::string> mounts() override {
        std::lock_guard lock(mutex);
        return mount_table;
    }
    Result<bool> freeze(const std::string& point) override {
        std::lock_guard lock(mutex);
        calls.push_back("freeze " + point);
        if (point == fail_on) {
            return make_coded_error(code::kIoError, "FIFREEZE {}: Input/output error", point);
        }
        return frozen.insert(point).second;
    }
    Result<bool> thaw(const std::string& point) override {
        std::lock_guard lock(mutex);
        calls.push_back("thaw " + point);
        return frozen.erase(point) > 0;
    }

    std::mutex mutex;
    std::string mount_table;
    std::string fail_on;  // freeze() of this mount point fails
    std::set<std::string> frozen;
    std::vector<std::string> calls;
};

}  // namespace sbx::agent
