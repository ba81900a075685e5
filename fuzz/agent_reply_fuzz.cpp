// libFuzzer target: a hostile agent's replies into the host client
// (docs/agent-protocol.md, "Host-side expectations"). The input is the
// agent's side of a socket pair: byte 0 picks the client call, byte 1's
// low bit whether the hello is fuzzed too (else a valid one goes first),
// the rest are records encoded as frames (so JSON and DATA stay
// reachable): tag 0 JSON text, 1 DATA (channel, u64 offset, bytes), 2 EOF
// (channel), 3 raw bytes; lengths are u16. The agent's end is then closed.
// Only "no crash, no hang" is checked: every call must return.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "guest-agent/client/agent_client.hpp"
#include "guest-agent/exec/exec_client.hpp"
#include "guest-agent/files/files_client.hpp"
#include "guest-agent/forward/forward_client.hpp"
#include "guest-agent/identity/identity_client.hpp"

namespace {

using namespace sbx;
using namespace sbx::agent;

struct Input {
    const std::uint8_t* data;
    std::size_t size;
    std::size_t pos = 0;

    [[nodiscard]] bool done() const { return pos >= size; }
    std::uint8_t byte() { return done() ? 0 : data[pos++]; }
    std::uint64_t number(int bytes) {
        std::uint64_t v = 0;
        for (int i = 0; i < bytes; ++i) {
            v |= std::uint64_t{byte()} << (8 * i);
        }
        return v;
    }
    std::span<const std::uint8_t> take(std::size_t n) {
        n = std::min(n, size - std::min(pos, size));
        auto out = std::span(data + pos, n);
        pos += n;
        return out;
    }
};

std::vector<std::uint8_t> encode(Input& in, bool fuzz_hello) {
    std::vector<std::uint8_t> out;
    if (!fuzz_hello) {
        encode_json(R"({"type":"hello","version":1,"agent":"fuzz","boot_id":"b"})", out);
    }
    while (!in.done()) {
        switch (in.byte() % 4) {
            case 0: {
                auto text = in.take(in.number(2));
                encode_json(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), out);
                break;
            }
            case 1: {
                const auto channel = static_cast<Channel>(in.byte() % 4);
                const std::uint64_t offset = in.number(8);
                encode_data(channel, offset, in.take(in.number(2)), out);
                break;
            }
            case 2:
                encode_eof(static_cast<Channel>(in.byte() % 4), out);
                break;
            default: {
                auto raw = in.take(in.number(2));
                out.insert(out.end(), raw.begin(), raw.end());
                break;
            }
        }
    }
    return out;
}

Result<void> discard(std::span<const std::uint8_t>) { return ok(); }

void drive(AgentClient& client, std::uint8_t op) {
    const ExecRequest request{.argv = {"x"}};
    const OutputSink sink = [](Channel, std::uint64_t, std::span<const std::uint8_t>) {};
    switch (op % 19) {
        case 0: (void)client.health(); break;
        case 1: (void)files::stat(client, "/f"); break;
        case 2: (void)files::list(client, "/d"); break;
        case 3: (void)files::read_file_text(client, "/f", 4096); break;
        case 4: (void)files::read_file(client, "/f", discard, {}, 1 << 16); break;
        case 5: (void)files::get_tar(client, "/d", discard, 1 << 16); break;
        case 6: (void)files::write_file_text(client, "/f", "content"); break;
        case 7: (void)exec(client, request); break;
        case 8: (void)exec_detached(client, request); break;
        case 9: (void)attach(client, "p1", 0, true, sink); break;
        case 10: (void)attach(client, "p1", 0, false, sink); break;
        case 11: (void)proc_status(client, "p1"); break;
        case 12: (void)proc_list(client); break;
        case 13: (void)proc_signal(client, "p1", 15); break;
        case 14: (void)proc_remove(client, "p1"); break;
        case 15: (void)identity(client, IdentityRequest{}); break;
        case 16: {
            int left = 2;
            (void)files::put_tar(client, "/d", [&left](std::span<std::uint8_t> buffer) -> Result<std::size_t> {
                const std::size_t n = left-- > 0 ? std::min<std::size_t>(buffer.size(), 512) : 0;
                std::memset(buffer.data(), 0, n);
                return n;
            });
            break;
        }
        case 17: {
            const std::string big(kStdinChunk + 100, 'x');  // two requests
            (void)proc_stdin(client, "p1", std::span(reinterpret_cast<const std::uint8_t*>(big.data()), big.size()), true);
            break;
        }
        default:
            // Calls in sequence: whatever the first left behind.
            (void)files::stat(client, "/f");
            (void)exec(client, request);
            (void)client.health();
            break;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) {
        return 0;
    }
    Input in{data, size, 2};
    const std::uint8_t op = data[0];
    const std::vector<std::uint8_t> agent_bytes = encode(in, (data[1] & 1) != 0);

    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
        return 0;
    }
    UniqueFd client_end(fds[0]);
    // The "agent": sends its bytes, closes its sending side, and reads
    // (discarding) what the client sends until the client closes.
    std::thread agent([fd = UniqueFd(fds[1]), &agent_bytes] {
        std::span<const std::uint8_t> rest(agent_bytes);
        while (!rest.empty()) {
            const ssize_t n = ::send(fd.get(), rest.data(), rest.size(), MSG_NOSIGNAL);
            if (n <= 0) {
                break;
            }
            rest = rest.subspan(static_cast<std::size_t>(n));
        }
        ::shutdown(fd.get(), SHUT_WR);
        std::uint8_t sink[4096];
        while (::read(fd.get(), sink, sizeof sink) > 0) {
        }
    });
    {
        using namespace std::chrono_literals;
        auto client = AgentClient::handshake(std::move(client_end), "token", 2s, 2s);
        if (client) {
            if (op % 19 == 18 && (data[1] & 2) != 0) {
                (void)open_tcp(std::move(*client), "127.0.0.1", 80);
            } else {
                drive(*client, op);
            }
        }
    }  // the client's end closes here, which ends the agent thread
    agent.join();
    return 0;
}
