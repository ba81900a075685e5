#include "host-tools/sbxd/daemon/static_files.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/unique_fd.hpp"
#include "host-tools/sbxd/api/api_error.hpp"

namespace sbx::sbxd {

namespace {

Error not_found(std::string_view path) {
    return make_coded_error(api::code::kNotFound, "no file {}", path);
}

// Whether every '/'-separated segment after the first '/' is a plain name.
bool plain_relative_path(std::string_view path) {
    if (path.size() < 2 || path.front() != '/' || path.find('\0') != std::string_view::npos ||
        path.find('\\') != std::string_view::npos) {
        return false;
    }
    std::string_view rest = path.substr(1);
    while (true) {
        const auto slash = rest.find('/');
        const std::string_view segment = rest.substr(0, slash);
        if (segment.empty() || segment == "." || segment == "..") {
            return false;
        }
        if (slash == std::string_view::npos) {
            return true;
        }
        rest = rest.substr(slash + 1);
    }
}

}  // namespace

std::string_view content_type_for(std::string_view name) {
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 16> kTypes{{
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".png", "image/png"},
        {".svg", "image/svg+xml"},
        {".ico", "image/x-icon"},
        {".jpg", "image/jpeg"},
        {".gif", "image/gif"},
        {".mp3", "audio/mpeg"},
        {".oga", "audio/ogg"},
        {".ttf", "font/ttf"},
        {".woff", "font/woff"},
        {".woff2", "font/woff2"},
        {".txt", "text/plain; charset=utf-8"},
        {".md", "text/plain; charset=utf-8"},
    }};
    const auto slash = name.rfind('/');
    const auto dot = name.rfind('.');
    if (dot != std::string_view::npos && (slash == std::string_view::npos || dot > slash)) {
        const std::string_view extension = name.substr(dot);
        for (const auto& [suffix, type] : kTypes) {
            if (extension == suffix) {
                return type;
            }
        }
    }
    return "application/octet-stream";
}

Result<StaticFile> read_static_file(const std::string& root, std::string_view path) {
    if (!plain_relative_path(path)) {
        return not_found(path);
    }
    UniqueFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) {
        return make_coded_error(api::code::kNotFound, "the viewer's files ({}) are not installed", root);
    }
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    const std::string relative(path.substr(1));
    UniqueFd file(static_cast<int>(::syscall(SYS_openat2, dir.get(), relative.c_str(), &how, sizeof how)));
    struct stat st {};
    if (!file || ::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<std::size_t>(st.st_size) > kMaxStaticFileBytes) {
        return not_found(path);
    }
    StaticFile out{std::string(content_type_for(path)), std::string(static_cast<std::size_t>(st.st_size), '\0')};
    std::size_t have = 0;
    while (have < out.body.size()) {
        ssize_t n = ::read(file.get(), out.body.data() + have, out.body.size() - have);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return make_coded_error(api::code::kInternal, "reading {}{}: {}", root, path,
                                    n == 0 ? "it shrank" : std::strerror(errno));
        }
        have += static_cast<std::size_t>(n);
    }
    return out;
}

}  // namespace sbx::sbxd
