#include "guest-agent/exec/output_log.hpp"

#include <algorithm>
#include <cstring>

namespace sbx::agent {

void OutputLog::append(Channel channel, std::span<const std::uint8_t> bytes) {
    if (bytes.empty()) {
        return;
    }
    if (runs_.empty() || runs_.back().channel != channel) {
        runs_.push_back(Run{end_, channel});
    }
    if (bytes.size() > capacity_) {  // only the last capacity_ bytes can stay
        end_ += bytes.size() - capacity_;
        bytes = bytes.last(capacity_);
    }
    // Until the first wrap, offsets are ring indices, so growing keeps them.
    const auto needed = static_cast<std::size_t>(std::min<std::uint64_t>(capacity_, end_ + bytes.size()));
    if (ring_.size() < needed) {
        ring_.resize(std::max(needed, std::min(capacity_, ring_.size() * 2)));
    }
    std::size_t at = static_cast<std::size_t>(end_ % capacity_);
    const std::size_t first_part = std::min(bytes.size(), capacity_ - at);
    std::memcpy(ring_.data() + at, bytes.data(), first_part);
    std::memcpy(ring_.data(), bytes.data() + first_part, bytes.size() - first_part);
    end_ += bytes.size();
    if (end_ > capacity_) {
        first_ = std::max(first_, end_ - capacity_);
    }
    if (runs_.size() > max_runs_) {
        runs_.pop_front();
        first_ = std::max(first_, runs_.front().start);
    }
    drop_runs_before_first();
}

void OutputLog::drop_runs_before_first() {
    while (runs_.size() >= 2 && runs_[1].start <= first_) {
        runs_.pop_front();
    }
}

void OutputLog::copy_out(std::uint64_t offset, std::size_t length, std::vector<std::uint8_t>& out) const {
    out.resize(length);
    if (length == 0) {
        return;
    }
    const std::size_t at = static_cast<std::size_t>(offset % capacity_);
    const std::size_t first_part = std::min(length, capacity_ - at);
    std::memcpy(out.data(), ring_.data() + at, first_part);
    std::memcpy(out.data() + first_part, ring_.data(), length - first_part);
}

OutputLog::Piece OutputLog::read(std::uint64_t offset, std::size_t max_bytes) const {
    Piece piece;
    piece.offset = offset;
    if (offset < first_ || offset >= end_ || max_bytes == 0) {
        return piece;
    }
    // The run holding `offset`: the last one starting at or before it.
    auto next = std::upper_bound(runs_.begin(), runs_.end(), offset,
                                 [](std::uint64_t o, const Run& run) { return o < run.start; });
    const Run& run = *std::prev(next);
    const std::uint64_t run_end = next == runs_.end() ? end_ : next->start;
    piece.channel = run.channel;
    copy_out(offset, static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes, run_end - offset)),
             piece.bytes);
    return piece;
}

std::vector<std::uint8_t> OutputLog::tail(std::size_t max_bytes) const {
    const std::uint64_t from = end_ - std::min<std::uint64_t>(end_ - first_, max_bytes);
    std::vector<std::uint8_t> out;
    copy_out(from, static_cast<std::size_t>(end_ - from), out);
    return out;
}

}  // namespace sbx::agent
