// Bodies that do not fit one string: a response body produced piece by
// piece (BodyWriter, sent with chunked transfer coding, RFC 9112 §7.1) and
// a request body consumed piece by piece (BodyReader, for uploads of any
// size). Each is a bounded queue between the io_context, which does the
// socket I/O and never blocks, and one thread of the handler's, which may
// block: a producer waits while the client reads slowly, the io_context
// stops reading while the consumer is slow, so neither side buffers more
// than the queue's limit.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "base/result.hpp"

namespace sbx::sbxd::http {

// The producer's end of a streamed response.
class BodyWriter {
public:
    // `wake` runs on the producer's thread and must hand over to the
    // io_context (asio::post): data is ready, or the producer finished.
    BodyWriter(std::size_t limit, std::function<void()> wake);

    // Queues `bytes` as one chunk, waiting while `limit` bytes are queued
    // and unsent. An error once the client is gone or the server stops:
    // the producer should end then.
    [[nodiscard]] Result<void> write(std::string_view bytes);
    [[nodiscard]] bool cancelled() const;

    // While the returned guard lives, `hook` runs (once, on the io_context
    // or a stopping server's thread) when the response is cancelled, so a
    // producer blocked elsewhere (reading from the guest) can be unblocked;
    // the guard's destructor waits for a running hook.
    class CancelHook {
    public:
        explicit CancelHook(BodyWriter* writer) : writer_(writer) {}
        ~CancelHook();
        CancelHook(const CancelHook&) = delete;
        CancelHook& operator=(const CancelHook&) = delete;

    private:
        BodyWriter* writer_;
    };
    [[nodiscard]] CancelHook on_cancel(std::function<void()> hook);

    // The io_context's side.
    [[nodiscard]] std::optional<std::string> take();
    [[nodiscard]] bool finished() const;  // the producer returned and all was taken
    void finish();                        // the producer returned
    // The client left, or (from the producer) the body cannot be completed:
    // the connection closes without the last chunk.
    void cancel();

private:
    std::size_t limit_;
    std::function<void()> wake_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::string> chunks_;
    std::size_t queued_ = 0;
    bool done_ = false;
    bool cancelled_ = false;
    std::mutex hook_mutex_;  // held while the hook runs and while it is set or cleared
    std::function<void()> hook_;
};

// The consumer's end of a streamed request body.
class BodyReader {
public:
    // `resume` runs on the consumer's thread and must hand over to the
    // io_context: the queue has room again after push() said it is full.
    BodyReader(std::size_t limit, std::function<void()> resume);

    // Up to out.size() bytes of the body; 0 at its end; an error when the
    // client went away, timed out or sent a malformed body.
    [[nodiscard]] Result<std::size_t> read(std::span<std::uint8_t> out);
    [[nodiscard]] std::uint64_t received() const;

    // The io_context's side. push() returns false when the queue is full:
    // read no more until resume runs.
    [[nodiscard]] bool push(std::string bytes);
    void finish();
    void fail(std::string why);
    [[nodiscard]] bool complete() const;  // the whole body arrived

private:
    std::size_t limit_;
    std::function<void()> resume_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::string> chunks_;
    std::size_t front_used_ = 0;
    std::size_t queued_ = 0;
    std::uint64_t received_ = 0;
    bool paused_ = false;
    bool complete_ = false;
    std::optional<std::string> error_;
};

// The threads that run producers and upload handlers: each may block for
// as long as its stream lasts, so they do not take workers from the pool.
// Finished threads are joined on the next start(); the destructor cancels
// what still runs (through the callbacks given) and joins it.
class StreamThreads {
public:
    StreamThreads() = default;
    ~StreamThreads();
    StreamThreads(const StreamThreads&) = delete;
    StreamThreads& operator=(const StreamThreads&) = delete;

    // False when `max` threads are running.
    [[nodiscard]] bool start(std::size_t max, std::function<void()> body, std::function<void()> cancel);
    void cancel_all();

private:
    struct Entry {
        std::thread thread;
        std::function<void()> cancel;
        bool done = false;
    };
    std::mutex mutex_;
    std::list<Entry> entries_;
    bool stopping_ = false;
};

}  // namespace sbx::sbxd::http
