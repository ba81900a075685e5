#include "host-tools/sbxd/http/stream.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "host-tools/sbxd/api/api_error.hpp"

namespace sbx::sbxd::http {

namespace {

Error client_gone() {
    return make_coded_error("cancelled", "the client went away");
}

}  // namespace

BodyWriter::BodyWriter(std::size_t limit, std::function<void()> wake)
    : limit_(std::max<std::size_t>(limit, 1)), wake_(std::move(wake)) {}

Result<void> BodyWriter::write(std::string_view bytes) {
    if (bytes.empty()) {
        return cancelled() ? Result<void>(client_gone()) : ok();
    }
    bool was_empty = false;
    {
        std::unique_lock lock(mutex_);
        // One chunk over the limit still goes, alone.
        changed_.wait(lock, [&] { return cancelled_ || queued_ == 0 || queued_ + bytes.size() <= limit_; });
        if (cancelled_) {
            return client_gone();
        }
        was_empty = chunks_.empty();
        chunks_.emplace_back(bytes);
        queued_ += bytes.size();
    }
    // The io_context takes chunks until the queue is empty; only then can
    // it be idle, so only the first chunk into an empty queue wakes it.
    if (was_empty) {
        wake_();
    }
    return ok();
}

bool BodyWriter::cancelled() const {
    std::lock_guard lock(mutex_);
    return cancelled_;
}

BodyWriter::CancelHook BodyWriter::on_cancel(std::function<void()> hook) {
    bool run_now = false;
    {
        std::lock_guard hook_lock(hook_mutex_);
        std::lock_guard lock(mutex_);
        run_now = cancelled_;
        hook_ = std::move(hook);
    }
    if (run_now) {
        std::lock_guard hook_lock(hook_mutex_);
        if (auto late = std::exchange(hook_, nullptr)) {
            late();
        }
    }
    return CancelHook(this);
}

BodyWriter::CancelHook::~CancelHook() {
    std::lock_guard hook_lock(writer_->hook_mutex_);
    writer_->hook_ = nullptr;
}

std::optional<std::string> BodyWriter::take() {
    std::lock_guard lock(mutex_);
    if (chunks_.empty()) {
        return std::nullopt;
    }
    std::string chunk = std::move(chunks_.front());
    chunks_.pop_front();
    queued_ -= chunk.size();
    changed_.notify_all();
    return chunk;
}

bool BodyWriter::finished() const {
    std::lock_guard lock(mutex_);
    return done_ && chunks_.empty();
}

void BodyWriter::finish() {
    {
        std::lock_guard lock(mutex_);
        done_ = true;
    }
    wake_();
}

void BodyWriter::cancel() {
    {
        std::lock_guard lock(mutex_);
        if (cancelled_) {
            return;
        }
        cancelled_ = true;
        chunks_.clear();
        queued_ = 0;
        changed_.notify_all();
    }
    std::lock_guard hook_lock(hook_mutex_);
    if (auto hook = std::exchange(hook_, nullptr)) {
        hook();
    }
}

BodyReader::BodyReader(std::size_t limit, std::function<void()> resume)
    : limit_(std::max<std::size_t>(limit, 1)), resume_(std::move(resume)) {}

Result<std::size_t> BodyReader::read(std::span<std::uint8_t> out) {
    bool wake = false;
    std::size_t n = 0;
    {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !chunks_.empty() || complete_ || error_; });
        if (error_) {
            return make_coded_error(api::code::kBadRequest, "reading the request body: {}", *error_);
        }
        while (n < out.size() && !chunks_.empty()) {
            const std::string& front = chunks_.front();
            std::size_t take = std::min(out.size() - n, front.size() - front_used_);
            std::memcpy(out.data() + n, front.data() + front_used_, take);
            n += take;
            front_used_ += take;
            queued_ -= take;
            if (front_used_ == front.size()) {
                chunks_.pop_front();
                front_used_ = 0;
            }
        }
        // Resume at half the limit, so the io_context reads in large steps.
        if (paused_ && queued_ <= limit_ / 2) {
            paused_ = false;
            wake = true;
        }
    }
    if (wake) {
        resume_();
    }
    return n;
}

std::uint64_t BodyReader::received() const {
    std::lock_guard lock(mutex_);
    return received_;
}

bool BodyReader::push(std::string bytes) {
    std::lock_guard lock(mutex_);
    if (error_) {
        return true;  // nobody reads any more; the io_context drops it
    }
    queued_ += bytes.size();
    received_ += bytes.size();
    chunks_.push_back(std::move(bytes));
    changed_.notify_all();
    if (queued_ >= limit_) {
        paused_ = true;
        return false;
    }
    return true;
}

void BodyReader::finish() {
    std::lock_guard lock(mutex_);
    complete_ = true;
    changed_.notify_all();
}

void BodyReader::fail(std::string why) {
    std::lock_guard lock(mutex_);
    if (!complete_ && !error_) {
        error_ = std::move(why);
        changed_.notify_all();
    }
}

bool BodyReader::complete() const {
    std::lock_guard lock(mutex_);
    return complete_;
}

StreamThreads::~StreamThreads() {
    cancel_all();
    std::list<Entry> entries;
    {
        std::lock_guard lock(mutex_);
        entries.swap(entries_);
    }
    for (auto& entry : entries) {
        entry.thread.join();
    }
}

bool StreamThreads::start(std::size_t max, std::function<void()> body, std::function<void()> cancel) {
    std::list<Entry> finished;
    std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end();) {
        auto next = std::next(it);
        if (it->done) {
            finished.splice(finished.end(), entries_, it);
        }
        it = next;
    }
    for (auto& entry : finished) {
        entry.thread.join();  // it has returned, or is returning
    }
    if (stopping_ || entries_.size() >= max) {
        return false;
    }
    auto& entry = entries_.emplace_back();
    entry.cancel = std::move(cancel);
    entry.thread = std::thread([this, &entry, body = std::move(body)] {
        body();
        std::lock_guard done_lock(mutex_);
        entry.done = true;
    });
    return true;
}

void StreamThreads::cancel_all() {
    std::vector<std::function<void()>> cancels;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        for (auto& entry : entries_) {
            if (!entry.done) {
                cancels.push_back(entry.cancel);
            }
        }
    }
    for (auto& cancel : cancels) {
        cancel();
    }
}

}  // namespace sbx::sbxd::http
