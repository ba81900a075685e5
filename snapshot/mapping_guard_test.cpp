// MappingGuard on a real MAP_PRIVATE mapping of a file that another
// hand truncates: in a child process, touching a page past the new end
// ends the child with status 4 and one line naming the file; without a
// guard (or outside the guarded range) SIGBUS stays fatal as before.
#include "snapshot/mapping_guard.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <csignal>
#include <vector>
#include <string>

using namespace sbx::snapshot;

namespace {

constexpr std::size_t kPages = 4;

struct MappedFile {
    std::string path;
    int fd = -1;
    std::uint8_t* map = nullptr;
    std::size_t size = 0;
    MappedFile() {
        char name[] = "/tmp/sbx-mapping-guard-XXXXXX";
        fd = ::mkstemp(name);
        REQUIRE(fd >= 0);
        path = name;
        size = kPages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
        REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
        void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        REQUIRE(p != MAP_FAILED);
        map = static_cast<std::uint8_t*>(p);
    }
    ~MappedFile() {
        ::munmap(map, size);
        ::close(fd);
        ::unlink(path.c_str());
    }
};

// Runs fn in a child with stderr to a pipe; returns its wait status and what it wrote.
template <typename Fn>
std::pair<int, std::string> in_child(Fn&& fn) {
    int pipefd[2];
    REQUIRE(::pipe(pipefd) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::dup2(pipefd[1], STDERR_FILENO);
        ::close(pipefd[0]);
        fn();
        ::_exit(0);
    }
    ::close(pipefd[1]);
    std::string out;
    char buf[512];
    for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) {
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(pipefd[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    return {status, out};
}

}  // namespace

TEST_CASE("a guarded mapping whose file shrank: one line and status 4, not a SIGBUS death") {
    MappedFile file;
    auto [status, err] = in_child([&] {
        auto guard = MappingGuard::install(MappingGuard::Fault::Bus, file.map, file.size, "guarded: " + file.path);
        if (!guard) {
            ::_exit(90);
        }
        volatile std::uint8_t first = file.map[0];  // readable while the file is whole
        (void)first;
        if (::ftruncate(file.fd, 0) != 0) {
            ::_exit(91);
        }
        volatile std::uint8_t past = file.map[file.size - 1];  // SIGBUS (mmap(2))
        (void)past;
        ::_exit(92);
    });
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == MappingGuard::kExitStatus);
    CHECK(err.find(file.path) != std::string::npos);
    CHECK(err.find("guarded: ") == 0);
}

TEST_CASE("outside a guard, or after it is gone, SIGBUS keeps its default action") {
    MappedFile file;
    auto [status, err] = in_child([&] {
        ::signal(SIGBUS, SIG_DFL);  // the action before the guard (a sanitizer may have its own)
        {
            auto guard = MappingGuard::install(MappingGuard::Fault::Bus, file.map, file.size, "guarded: " + file.path);
            if (!guard) {
                ::_exit(90);
            }
        }  // removed again
        if (::ftruncate(file.fd, 0) != 0) {
            ::_exit(91);
        }
        volatile std::uint8_t past = file.map[file.size - 1];
        (void)past;
        ::_exit(92);
    });
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGBUS);
    CHECK(err.empty());
}

TEST_CASE("guards are a bounded table") {
    MappedFile file;
    auto [status, err] = in_child([&] {  // the handler stays out of this process
        std::vector<MappingGuard> guards;
        for (std::size_t i = 0; i < MappingGuard::kMaxGuards; ++i) {
            auto g = MappingGuard::install(MappingGuard::Fault::Bus, file.map, file.size, "guarded: " + file.path);
            if (!g) {
                ::_exit(90);
            }
            guards.push_back(std::move(*g));
        }
        auto refused = MappingGuard::install(MappingGuard::Fault::Bus, file.map, file.size, "guarded: " + file.path);
        if (refused || refused.error().code != "limit") {
            ::_exit(91);
        }
        guards.pop_back();
        ::_exit(MappingGuard::install(MappingGuard::Fault::Bus, file.map, file.size, "guarded: " + file.path) ? 0 : 92);
    });
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a PROT_NONE page under a Segv guard: its latest message and status 4") {
    MappedFile file;
    auto [status, err] = in_child([&] {
        auto guard = MappingGuard::install(MappingGuard::Fault::Segv, file.map, file.size, "first message");
        if (!guard) {
            ::_exit(90);
        }
        guard->set_message("lazy restore: chunk 3 failed its checksum");
        if (::mprotect(file.map, file.size, PROT_NONE) != 0) {
            ::_exit(91);
        }
        volatile std::uint8_t touched = file.map[1];
        (void)touched;
        ::_exit(92);
    });
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == MappingGuard::kExitStatus);
    CHECK(err == "lazy restore: chunk 3 failed its checksum\n");
}
