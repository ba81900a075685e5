// The console pump between a real UART model and a console on a Unix
// socket (the peer is the test), on an EventLoop driven one wait at a time.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "base/unix_socket.hpp"
#include "devices/device_test_util.hpp"
#include "vmm/console_pump.hpp"

using namespace sbx;
using namespace sbx::testing;

namespace {

struct Rig {
    Rig() {
        char tmpl[] = "/tmp/sbx-console-pump-XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        dir = tmpl;
        auto listener = listen_unix(dir + "/console.sock");
        REQUIRE(listener);
        auto config = ConsoleConfig::parse("socket:" + dir + "/console.sock");
        REQUIRE(config);
        auto console = Console::open(*config);
        REQUIRE(console);
        int fd = ::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC);
        REQUIRE(fd >= 0);
        peer = UniqueFd(fd);
        auto created = ConsolePump::create(std::move(*console));
        REQUIRE(created);
        pump = std::move(*created);
        serial = std::make_unique<Serial>(irq, [this] { pump->output_ready(); });
        auto l = EventLoop::create();
        REQUIRE(l);
        loop = std::move(*l);
        REQUIRE(pump->attach(*serial, *loop));
    }
    ~Rig() {
        pump.reset();
        std::string cmd = "rm -rf " + dir;
        [[maybe_unused]] int rc = std::system(cmd.c_str());
    }

    void guest_writes(const std::string& text) {
        for (char c : text) {
            wr(*serial, 0, static_cast<std::uint8_t>(c));
        }
    }
    std::string guest_reads() {
        std::string got;
        while ((rd(*serial, 5) & 0x01) != 0) {  // LSR data ready
            got.push_back(static_cast<char>(rd(*serial, 0)));
        }
        return got;
    }
    // Runs the loop until `done` or about 2 s.
    template <class Done>
    void run_until(Done done) {
        for (int i = 0; i < 400 && !done(); ++i) {
            REQUIRE(loop->run_once(5));
        }
    }
    // What the peer can read without waiting more than `ms` for each part.
    std::string peer_reads(int ms = 50) {
        std::string got;
        char buf[65536];
        pollfd p{peer.get(), POLLIN, 0};
        while (::poll(&p, 1, ms) == 1) {
            ssize_t n = ::read(peer.get(), buf, sizeof buf);
            if (n <= 0) {
                break;
            }
            got.append(buf, static_cast<std::size_t>(n));
        }
        return got;
    }

    std::string dir;
    UniqueFd peer;
    CountingIrq irq;
    std::unique_ptr<ConsolePump> pump;
    std::unique_ptr<Serial> serial;
    std::unique_ptr<EventLoop> loop;
};

}  // namespace

TEST_CASE("guest output reaches the console, in order") {
    Rig rig;
    rig.guest_writes("hello, ");
    rig.run_until([] { return false; });
    rig.guest_writes("console\n");
    rig.run_until([] { return false; });
    CHECK(rig.peer_reads() == "hello, console\n");
}

TEST_CASE("console input reaches the receive FIFO; more than it holds waits, nothing is lost") {
    Rig rig;
    std::string typed;
    for (int i = 0; i < 300; ++i) {
        typed.push_back(static_cast<char>('a' + i % 26));
    }
    REQUIRE(::write(rig.peer.get(), typed.data(), typed.size()) == static_cast<ssize_t>(typed.size()));
    std::string received;
    for (int round = 0; round < 200 && received.size() < typed.size(); ++round) {
        rig.run_until([&] { return (rd(*rig.serial, 5) & 0x01) != 0; });
        std::string part = rig.guest_reads();
        CHECK(part.size() <= Serial::kRxFifoSize);
        received += part;
    }
    CHECK(received == typed);
}

TEST_CASE("a reader that stops reading never blocks the pump; it gets the rest when it reads again") {
    Rig rig;
    // Far more than the socket buffers hold: the UART then drops what
    // exceeds its own bound, and counts it.
    const std::string chunk(16 * 1024, 'x');
    std::size_t produced = 0;
    for (int i = 0; i < 64; ++i) {
        rig.guest_writes(chunk);
        produced += chunk.size();
        REQUIRE(rig.loop->run_once(0));  // returns at once, whatever the reader does
    }
    std::size_t delivered = 0;
    for (int i = 0; i < 200; ++i) {
        delivered += rig.peer_reads(5).size();
        REQUIRE(rig.loop->run_once(5));
    }
    delivered += rig.peer_reads().size();
    CHECK(rig.serial->dropped_output_bytes() > 0);
    CHECK(delivered + rig.serial->dropped_output_bytes() == produced);
}

TEST_CASE("drain writes the output still waiting after the loop stopped") {
    Rig rig;
    rig.guest_writes("last words\n");
    rig.pump->drain(std::chrono::milliseconds(500));
    CHECK(rig.peer_reads() == "last words\n");
}

TEST_CASE("console input that ends (EOF) stops being read; output still flows") {
    Rig rig;
    REQUIRE(::shutdown(rig.peer.get(), SHUT_WR) == 0);
    rig.run_until([] { return false; });
    rig.guest_writes("still here\n");
    rig.run_until([] { return false; });
    CHECK(rig.peer_reads() == "still here\n");
}
