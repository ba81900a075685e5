// logs: a sandbox's guest console over GET /v1/sandboxes/{id}/logs
// (docs/api.md), written to stdout as the raw bytes the guest wrote,
// terminal or not (with --json: base64 pieces in JSON lines). --follow polls
// from where the last read stopped every kPollInterval, until sbx is
// interrupted or the sandbox is stopped, crashed or gone; each read goes
// through one fixed buffer, whatever the log's size.
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "host-tools/sbx/commands.hpp"

namespace sbx::cli {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(500);
// A read that brought this much may have more behind it: ask again at once.
constexpr std::uint64_t kCatchUpBytes = 1 << 20;

// As exec's output: a reader that went away (`sbx logs ID | head`) ends
// sbx the way it would end cat.
void write_out(std::string_view bytes) {
    while (!bytes.empty()) {
        ssize_t n = ::write(STDOUT_FILENO, bytes.data(), bytes.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            std::_Exit(128 + SIGPIPE);
        }
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
}

std::uint64_t header_number(const HttpStream& stream, std::string_view name) {
    return std::strtoull(stream.header(name).c_str(), nullptr, 10);
}

struct Piece {
    std::uint64_t start = 0;  // Sandbox-Log-Offset
    std::uint64_t size = 0;   // Sandbox-Log-Size
    std::uint64_t bytes = 0;  // received and written
};

// One GET of the log, its body written out as it arrives; nothing (and
// `failure` set) when it failed.
std::optional<Piece> read_piece(const Context& ctx, const LogsCommand& command,
                                const std::vector<std::pair<std::string, std::string>>& query,
                                Failure& failure) {
    auto stream = ctx.client.open(get(target({"v1", "sandboxes", command.id, "logs"}, query)));
    if (!stream) {
        failure = explained(ctx, failure_of(stream.error()));
        return std::nullopt;
    }
    if (stream->status() != 200) {
        auto reply = stream->to_reply(1 << 20);
        failure = reply ? explained(ctx, failure_of(*reply)) : failure_of(reply.error());
        return std::nullopt;
    }
    Piece piece{header_number(*stream, "Sandbox-Log-Offset"), header_number(*stream, "Sandbox-Log-Size"), 0};
    std::array<char, std::size_t{64} << 10> chunk{};
    for (;;) {
        auto got = stream->read(chunk);
        if (!got) {
            failure = failure_of(got.error());
            return std::nullopt;
        }
        if (*got == 0) {
            return piece;
        }
        std::string_view bytes(chunk.data(), *got);
        if (command.json) {
            ctx.out.event({{"type", "log"},
                           {"id", command.id},
                           {"offset", piece.start + piece.bytes},
                           {"data", base64_encode(bytes)}});
        } else {
            write_out(bytes);
        }
        piece.bytes += *got;
    }
}

// Whether --follow should stop: the sandbox is gone, or in a state whose
// console no longer grows (a paused one wakes on a request and goes on).
bool sandbox_ended(const Context& ctx, const std::string& id) {
    Outcome reply = call(ctx, get(target({"v1", "sandboxes", id})));
    if (!reply.ok()) {
        return reply.failure().code == "not_found";
    }
    const std::string state = reply.body().value("sandbox", Json::object()).value("state", "");
    return state == "stopped" || state == "crashed" || state == "deleting";
}

}  // namespace

int run_logs(const Context& ctx, const LogsCommand& command) {
    std::uint64_t next = 0;
    bool first = true;
    bool ending = false;
    for (;;) {
        std::vector<std::pair<std::string, std::string>> query;
        if (first && command.tail) {
            query = {{"tail", std::to_string(*command.tail)}};
        } else {
            query = {{"offset", std::to_string(next)}};
        }
        Failure failure;
        auto piece = read_piece(ctx, command, query, failure);
        if (!piece) {
            // Deleted while we followed: the end of its log.
            if (!first && failure.code == "not_found") {
                return kExitOk;
            }
            return ctx.out.fail(failure);
        }
        if (!first && piece->size < next) {
            // A new VMM (a resume, a wake) started the file afresh: from its start.
            if (command.json) {
                ctx.out.event({{"type", "log_restarted"}, {"id", command.id}, {"size", piece->size}});
            } else {
                // stdout has the raw bytes, piped or not: the note goes to stderr either way.
                (void)std::fprintf(stderr, "sbx: the console log of %s began again\n", command.id.c_str());
            }
            next = 0;
            continue;
        }
        next = piece->start + piece->bytes;
        first = false;
        if (!command.follow || ending) {
            return kExitOk;
        }
        if (piece->bytes >= kCatchUpBytes) {
            continue;
        }
        // Nothing more is coming once it stopped: one last read for what
        // it wrote before, then the end.
        if (piece->bytes == 0 && sandbox_ended(ctx, command.id)) {
            ending = true;
            continue;
        }
        std::this_thread::sleep_for(kPollInterval);
    }
}

}  // namespace sbx::cli
