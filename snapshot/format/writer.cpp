#include "snapshot/format/writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/unique_fd.hpp"
#include "snapshot/format/io_queue.hpp"
#include "snapshot/format/layout.hpp"
#include "snapshot/format/private_pages.hpp"

namespace sbx::snapshot {

namespace {

using layout::ChunkEntry;
using layout::ChunkKind;

constexpr std::uint64_t kOtherTag = ~0ULL;  // transfers outside the memory pipeline
constexpr unsigned kIoDepth = 64;

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) {
    return (v + a - 1) / a * a;
}

// The file under its temporary name; removed unless committed.
struct TempFile {
    std::string path;
    UniqueFd fd;
    bool committed = false;
    TempFile() = default;
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    TempFile(TempFile&& o) noexcept : path(std::move(o.path)), fd(std::move(o.fd)), committed(o.committed) {
        o.path.clear();
    }
    TempFile& operator=(TempFile&&) = delete;
    ~TempFile() {
        if (!committed && !path.empty()) {
            ::unlink(path.c_str());
        }
    }
};

std::string parent_dir(const std::string& path) {
    auto slash = path.rfind('/');
    if (slash == std::string::npos) {
        return ".";
    }
    return slash == 0 ? "/" : path.substr(0, slash);
}

Result<TempFile> make_temp(const std::string& path) {
    auto slash = path.rfind('/');
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    std::string name = parent_dir(path) + "/." + base + ".tmp-XXXXXX";
    int fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd < 0) {
        return sys_error("io: cannot create a temporary file beside {}", path).with_code("io");
    }
    TempFile t;
    t.path = std::move(name);
    t.fd = UniqueFd(fd);
    return t;
}

bool printable_name(const std::string& s, std::size_t max) {
    return s.size() <= max && std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

Result<void> check_contents(const SnapshotContents& c, const WriteOptions& options) {
    if (auto checked = layout::check_info(c.info); !checked) {
        return checked.error().context("invalid").with_code("invalid");
    }
    if (c.info.format_version != kFormatVersion) {
        return format_error("invalid", "this writer only writes format version {}", kFormatVersion);
    }
    if (!printable_name(c.info.arch, layout::kNameBytes - 1) || c.info.arch.empty() ||
        !printable_name(c.info.cpu.vendor, layout::kNameBytes - 1)) {
        return format_error("invalid", "arch and CPU vendor must be printable and at most 15 bytes");
    }
    if (options.zstd_level < ZSTD_minCLevel() || options.zstd_level > ZSTD_maxCLevel()) {
        return format_error("invalid", "zstd level {} is outside {}..{}", options.zstd_level, ZSTD_minCLevel(),
                          ZSTD_maxCLevel());
    }
    if (c.sections.size() > layout::kMaxSections) {
        return format_error("invalid", "{} sections (at most {})", c.sections.size(), layout::kMaxSections);
    }
    std::vector<std::string_view> names;
    for (const auto& s : c.sections) {
        if (s.name.empty() || s.name.size() > layout::kMaxSectionName ||
            s.bytes.size() > layout::kMaxSectionBytes) {
            return format_error("invalid", "section '{}' has a bad name length or is over {} bytes", s.name,
                              layout::kMaxSectionBytes);
        }
        names.push_back(s.name);
    }
    std::sort(names.begin(), names.end());
    if (auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end()) {
        return format_error("invalid", "section {} appears twice", *dup);
    }
    if (c.memory.size() > layout::kMaxRegions) {
        return format_error("invalid", "{} memory regions (at most {})", c.memory.size(), layout::kMaxRegions);
    }
    std::vector<layout::RegionEntry> regions;
    for (std::size_t i = 0; i < c.memory.size(); ++i) {
        const auto& m = c.memory[i];
        const std::uint64_t len = m.host.size();
        if (len == 0 || m.guest_start % kPageSize != 0 || len % kPageSize != 0 ||
            len > UINT64_MAX - m.guest_start ||
            (i > 0 && m.guest_start < regions.back().guest_start + regions.back().length)) {
            return format_error("invalid",
                "memory region {} at {:#x} is empty, unaligned, wraps or is out of order", i,
                m.guest_start);
        }
        if (m.file) {
            struct stat st {};
            if (m.file->fd < 0 || ::fstat(m.file->fd, &st) != 0 || !S_ISREG(st.st_mode) ||
                m.file->offset % kPageSize != 0) {
                return format_error("invalid",
                                    "memory region {} at {:#x}: its mapped file is not an open regular file "
                                    "at a page-aligned offset",
                                    i, m.guest_start);
            }
            const auto size = static_cast<std::uint64_t>(st.st_size);
            if (m.file->offset > size || len > size - m.file->offset) {
                return format_error("io",
                                    "memory region {} at {:#x} maps bytes {}..{} of a file of {} (it shrank)",
                                    i, m.guest_start, m.file->offset, m.file->offset + len, size);
            }
        }
        regions.push_back({m.guest_start, len, 0});
    }
    if (auto checked = layout::check_working_set(c.working_set, regions); !checked) {
        return format_error("invalid", "{}", checked.error().message.substr(code::kCorrupt.size() + 2));
    }
    return ok();
}

bool all_zero(std::span<const std::uint8_t> d) {
    return d.empty() || (d[0] == 0 && std::memcmp(d.data(), d.data() + 1, d.size() - 1) == 0);
}

struct Job {
    std::size_t region;
    std::uint64_t rel;
    std::uint32_t length;
};

struct Slot {
    std::vector<std::uint8_t> buf;       // a zstd frame
    std::vector<std::uint8_t> gathered;  // a chunk of a mapped file's region, read without faulting
    std::vector<bool> written;           // per page of that chunk: a private copy
    bool from_gathered = false;          // the chunk's bytes are `gathered`, not guest memory
    ChunkKind kind = ChunkKind::Zero;
    std::uint32_t stored = 0;
    std::uint64_t checksum = 0;
    bool ready = false;
    bool done = false;  // its bytes are on their way to the file or need no write
    std::optional<Error> error;
};

struct CctxFree {
    void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};

// The memory pipeline: workers fill slots[i % window] for job i; the
// calling thread consumes jobs in order, assigns file offsets and queues
// the writes; a slot is reused once its write completed.
class MemoryWriter {
public:
    // `pagemap` is open when a region has a mapped file; without it such a
    // region is read through its mapping like any other.
    MemoryWriter(const SnapshotContents& c, const WriteOptions& o, IoQueue& io, unsigned threads,
                 const std::optional<PageMap>& pagemap)
        : contents_(c), options_(o), io_(io), raw_(c.info.mode == MemoryMode::Raw), pagemap_(pagemap) {
        const std::uint32_t chunk = c.info.chunk_size;
        for (std::size_t r = 0; r < c.memory.size(); ++r) {
            const std::uint64_t len = c.memory[r].host.size();
            for (std::uint64_t rel = 0; rel < len; rel += chunk) {
                jobs_.push_back(
                    {r, rel, static_cast<std::uint32_t>(std::min<std::uint64_t>(chunk, len - rel))});
            }
        }
        window_ = std::max(8U, threads * 4);
        slots_.resize(window_);
        threads_ = jobs_.empty() ? 0 : threads;
    }

    // Writes memory from file offset `start`; returns the regions and index.
    Result<void> run(std::uint64_t start, std::vector<layout::RegionEntry>& regions,
                     std::vector<ChunkEntry>& chunks, std::uint64_t& end, std::uint64_t& zero_bytes);

private:
    void worker();
    void process(const Job& job, Slot& slot, ZSTD_CCtx* cctx) const;
    [[nodiscard]] Result<bool> gather_mapped(const Job& job, Slot& slot) const;
    void on_done(std::uint64_t tag);
    void release_finished();
    Result<void> wait_io() {
        return io_.wait([this](std::uint64_t tag) { on_done(tag); });
    }

    const SnapshotContents& contents_;
    const WriteOptions& options_;
    IoQueue& io_;
    bool raw_;
    const std::optional<PageMap>& pagemap_;
    std::vector<Job> jobs_;
    std::vector<Slot> slots_;
    std::size_t window_ = 8;
    unsigned threads_ = 0;

    std::mutex mutex_;
    std::condition_variable ready_cv_, space_cv_;
    std::size_t next_job_ = 0;  // next job a worker takes
    std::size_t released_ = 0;  // jobs before this have given their slot back
    std::size_t consumed_ = 0;  // jobs the writer has handled
    bool stop_ = false;
};

// A chunk of a MAP_PRIVATE file mapping, into slot.gathered without
// touching a page the process has not written (on tmpfs a read fault on a
// hole fills it, and any read fault maps a file page): those pages read
// from the file, which is what the mapping shows for them, the written
// ones from the mapping. False: nothing was written and the file's bytes
// are a hole, so the chunk is zero without a read.
Result<bool> MemoryWriter::gather_mapped(const Job& job, Slot& slot) const {
    const auto& region = contents_.memory[job.region];
    const std::uint8_t* host = region.host.data() + job.rel;
    const std::size_t pages = job.length / kPageSize;  // regions and chunks are whole pages
    if (auto r = pagemap_->private_copies(host, pages, slot.written); !r) {
        return r.error();
    }
    const int fd = region.file->fd;
    const std::uint64_t at = region.file->offset + job.rel;
    if (std::find(slot.written.begin(), slot.written.end(), true) == slot.written.end()) {
        auto hole = file_range_is_hole(fd, at, job.length);
        if (!hole || *hole) {
            return hole ? Result<bool>(false) : Result<bool>(hole.error());
        }
    }
    slot.gathered.resize(job.length);
    for (std::size_t page = 0; page < pages;) {
        std::size_t end = page;
        while (end < pages && slot.written[end] == slot.written[page]) {
            ++end;
        }
        const std::uint64_t from = page * kPageSize, bytes = (end - page) * kPageSize;
        if (slot.written[page]) {
            std::memcpy(slot.gathered.data() + from, host + from, bytes);
        } else if (auto r = read_file_range(fd, at + from, {slot.gathered.data() + from, bytes}); !r) {
            return r.error();
        }
        page = end;
    }
    return true;
}

void MemoryWriter::process(const Job& job, Slot& slot, ZSTD_CCtx* cctx) const {
    auto data = std::span<const std::uint8_t>(contents_.memory[job.region].host).subspan(job.rel, job.length);
    slot.error.reset();
    slot.stored = job.length;
    slot.from_gathered = false;
    if (contents_.memory[job.region].file && pagemap_) {
        auto gathered = gather_mapped(job, slot);
        if (!gathered) {
            slot.error = gathered.error();
            return;
        }
        if (!*gathered) {
            slot.kind = ChunkKind::Zero;
            return;
        }
        slot.from_gathered = true;
        data = slot.gathered;
    }
    if (all_zero(data)) {
        slot.kind = ChunkKind::Zero;
        return;
    }
    if (!raw_) {
        slot.buf.resize(ZSTD_compressBound(contents_.info.chunk_size));
        // zstd (RFC 8878): one frame per chunk, content size recorded in the frame header.
        std::size_t n = ZSTD_compressCCtx(cctx, slot.buf.data(), slot.buf.size(), data.data(), data.size(),
                                          options_.zstd_level);
        if (ZSTD_isError(n) != 0U) {
            slot.error = format_error("io", "zstd compression failed: {}", ZSTD_getErrorName(n));
            return;
        }
        if (n < data.size()) {
            slot.kind = ChunkKind::Zstd;
            slot.stored = static_cast<std::uint32_t>(n);
            slot.checksum = layout::checksum({slot.buf.data(), n});
            return;
        }
    }
    slot.kind = ChunkKind::Plain;
    slot.checksum = layout::checksum(data);
}

void MemoryWriter::worker() {
    std::unique_ptr<ZSTD_CCtx, CctxFree> cctx(raw_ ? nullptr : ZSTD_createCCtx());
    for (;;) {
        std::size_t i = 0;
        {
            std::unique_lock lock(mutex_);
            space_cv_.wait(
                lock, [&] { return stop_ || next_job_ >= jobs_.size() || next_job_ < released_ + window_; });
            if (stop_ || next_job_ >= jobs_.size()) {
                return;
            }
            i = next_job_++;
        }
        Slot& slot = slots_[i % window_];
        if (!raw_ && !cctx) {
            slot.error = format_error("io", "zstd compression failed: cannot create a zstd context");
        } else {
            process(jobs_[i], slot, cctx.get());
        }
        {
            std::lock_guard lock(mutex_);
            slot.ready = true;
        }
        ready_cv_.notify_all();
    }
}

void MemoryWriter::on_done(std::uint64_t tag) {
    if (tag < jobs_.size()) {
        std::lock_guard lock(mutex_);
        slots_[tag % window_].done = true;
    }
    release_finished();
}

void MemoryWriter::release_finished() {
    {
        std::lock_guard lock(mutex_);
        while (released_ < consumed_ && slots_[released_ % window_].done) {
            Slot& s = slots_[released_ % window_];
            s.done = false;
            s.ready = false;
            ++released_;
        }
    }
    space_cv_.notify_all();
}

Result<void> MemoryWriter::run(std::uint64_t start, std::vector<layout::RegionEntry>& regions,
                               std::vector<ChunkEntry>& chunks, std::uint64_t& end,
                               std::uint64_t& zero_bytes) {
    std::uint64_t cursor = start;
    for (const auto& m : contents_.memory) {
        regions.push_back({m.guest_start, m.host.size(), raw_ ? cursor : 0});
        if (raw_) {
            cursor += m.host.size();  // page-multiple sizes keep every region page-aligned
        }
    }
    std::vector<std::jthread> workers;
    struct Stopper {
        MemoryWriter& w;
        explicit Stopper(MemoryWriter& writer) : w(writer) {}
        Stopper(const Stopper&) = delete;
        Stopper& operator=(const Stopper&) = delete;
        Stopper(Stopper&&) = delete;
        Stopper& operator=(Stopper&&) = delete;
        ~Stopper() {
            {
                std::lock_guard lock(w.mutex_);
                w.stop_ = true;
            }
            w.space_cv_.notify_all();
        }
    };
    for (unsigned t = 0; t < threads_; ++t) {
        workers.emplace_back([this] { worker(); });
    }
    Stopper stopper{*this};  // destroyed before `workers` joins them
    for (std::size_t i = 0; i < jobs_.size(); ++i) {
        while (released_ + window_ <= i) {  // only this thread advances released_
            if (auto w = wait_io(); !w) {
                return w;
            }
        }
        Slot& slot = slots_[i % window_];
        {
            std::unique_lock lock(mutex_);
            ready_cv_.wait(lock, [&] { return slot.ready; });
        }
        if (slot.error) {
            return *slot.error;
        }
        const Job& job = jobs_[i];
        const auto& region = regions[job.region];
        const std::uint64_t guest = region.guest_start + job.rel;
        bool written_later = false;
        if (slot.kind == ChunkKind::Zero) {
            zero_bytes += job.length;
            const bool extend = !chunks.empty() && chunks.back().kind == ChunkKind::Zero && job.rel != 0 &&
                                chunks.back().guest_start + chunks.back().length == guest &&
                                chunks.back().length + static_cast<std::uint64_t>(job.length) <= kMaxZeroRun;
            if (extend) {
                chunks.back().length += job.length;
            } else {
                chunks.push_back({ChunkKind::Zero, guest, job.length, 0, 0, 0});
            }
        } else {
            std::uint64_t offset = raw_ ? region.file_offset + job.rel : cursor;
            const std::uint8_t* data = slot.kind == ChunkKind::Zstd ? slot.buf.data()
                                       : slot.from_gathered
                                           ? slot.gathered.data()
                                           : contents_.memory[job.region].host.data() + job.rel;
            if (!raw_) {
                cursor += slot.stored;
            }
            chunks.push_back({slot.kind, guest, job.length, offset, slot.stored, slot.checksum});
            while (io_.full()) {
                if (auto w = wait_io(); !w) {
                    return w;
                }
            }
            // Only a write from the slot's buffers holds the slot; one from guest memory does not.
            written_later = slot.kind == ChunkKind::Zstd || slot.from_gathered;
            if (auto w = io_.write(written_later ? i : kOtherTag, data, slot.stored, offset); !w) {
                return w;
            }
        }
        {
            std::lock_guard lock(mutex_);
            consumed_ = i + 1;
            slot.done = slot.done || !written_later;
        }
        release_finished();
    }
    end = cursor;
    return io_.drain([this](std::uint64_t tag) { on_done(tag); });
}

}  // namespace

Result<WriteStats> write_snapshot(const std::string& path, const SnapshotContents& contents,
                                  const WriteOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto checked = check_contents(contents, options); !checked) {
        return checked.error();
    }
    auto temp = make_temp(path);
    if (!temp) {
        return temp.error();
    }
    const int fd = temp->fd.get();
    unsigned threads =
        options.threads != 0 ? options.threads : std::max(1U, std::thread::hardware_concurrency());
    IoQueue io = IoQueue::create(fd, kIoDepth);
    auto ignore = [](std::uint64_t) {};

    layout::Trailer trailer;
    std::uint64_t cursor = layout::kDataStart;
    for (const auto& s : contents.sections) {
        trailer.sections.push_back({s.name, cursor, s.bytes.size(), layout::checksum(s.bytes)});
        while (io.full()) {
            if (auto w = io.wait(ignore); !w) {
                return w.error();
            }
        }
        if (auto w = io.write(kOtherTag, s.bytes.data(), s.bytes.size(), cursor); !w) {
            return w.error();
        }
        cursor += s.bytes.size();
    }
    const bool raw = contents.info.mode == MemoryMode::Raw;
    WriteStats stats;
    std::uint64_t end = 0;
    std::optional<PageMap> pagemap;
    const auto has_file = [](const MemoryRegionView& m) { return m.file.has_value(); };
    if (std::any_of(contents.memory.begin(), contents.memory.end(), has_file)) {
        if (auto opened = PageMap::open(); opened) {
            pagemap.emplace(std::move(*opened));
        }
    }
    {
        MemoryWriter memory(contents, options, io, threads, pagemap);
        auto written = memory.run(raw ? align_up(cursor, kPageSize) : cursor, trailer.regions, trailer.chunks,
                                  end, stats.zero_bytes);
        if (!written) {
            return written.error();
        }
    }
    trailer.working_set = contents.working_set;
    for (const auto& r : trailer.regions) {
        stats.memory_bytes += r.length;
    }
    auto trailer_bytes = layout::encode_trailer(trailer);
    layout::Header header;
    header.info = contents.info;
    header.trailer_offset = std::max<std::uint64_t>(end, cursor);
    header.trailer_bytes = trailer_bytes.size();
    header.trailer_checksum = layout::checksum(trailer_bytes);
    header.file_bytes = header.trailer_offset + header.trailer_bytes;
    auto header_bytes = layout::encode_header(header);
    while (io.full()) {
        if (auto w = io.wait(ignore); !w) {
            return w.error();
        }
    }
    if (auto w = io.write(kOtherTag, trailer_bytes.data(), trailer_bytes.size(), header.trailer_offset); !w) {
        return w.error();
    }
    while (io.full()) {
        if (auto w = io.wait(ignore); !w) {
            return w.error();
        }
    }
    if (auto w = io.write(kOtherTag, header_bytes.data(), header_bytes.size(), 0); !w) {
        return w.error();
    }
    if (auto w = io.drain(ignore); !w) {
        return w.error();
    }
    if (::fsync(fd) != 0) {
        return sys_error("io: fsync {}", temp->path).with_code("io");
    }
    if (::rename(temp->path.c_str(), path.c_str()) != 0) {
        return sys_error("io: cannot rename {} to {}", temp->path, path).with_code("io");
    }
    temp->committed = true;
    auto dir = UniqueFd::open(parent_dir(path), O_RDONLY | O_DIRECTORY);
    if (!dir) {
        return dir.error().context("io").with_code("io");
    }
    if (::fsync(dir->get()) != 0) {
        return sys_error("io: fsync the directory of {}", path).with_code("io");
    }
    stats.file_bytes = header.file_bytes;
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return stats;
}

}  // namespace sbx::snapshot
