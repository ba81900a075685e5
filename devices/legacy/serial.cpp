#include "devices/legacy/serial.hpp"

#include "base/unique_fd.hpp"

namespace sbx {

namespace {

// Register offsets from the base port (PC16550D Table II). With LCR.DLAB set,
// offsets 0 and 1 address the divisor latch instead.
enum Reg : std::uint64_t { kData = 0, kIer = 1, kIirFcr = 2, kLcr = 3, kMcr = 4, kLsr = 5, kMsr = 6, kScr = 7 };

constexpr std::uint8_t kIerRxData = 0x01;
constexpr std::uint8_t kIerThrEmpty = 0x02;
constexpr std::uint8_t kIerMask = 0x0f;
constexpr std::uint8_t kIirNone = 0x01;
constexpr std::uint8_t kIirThrEmpty = 0x02;
constexpr std::uint8_t kIirRxData = 0x04;
constexpr std::uint8_t kIirFifoEnabled = 0xc0;  // reads as a 16550A with working FIFOs
constexpr std::uint8_t kLcrDlab = 0x80;
constexpr std::uint8_t kMcrLoop = 0x10;
constexpr std::uint8_t kLsrDataReady = 0x01;
constexpr std::uint8_t kLsrThrEmpty = 0x20;
constexpr std::uint8_t kLsrIdle = 0x40;
constexpr std::size_t kOutBufferFlush = 1024;

// In loopback the modem control outputs drive the modem status inputs
// (PC16550D, MCR bit 4): DTR->DSR, RTS->CTS, OUT1->RI, OUT2->DCD.
std::uint8_t loopback_msr(std::uint8_t mcr) {
    return static_cast<std::uint8_t>(((mcr & 0x01) << 5) | ((mcr & 0x02) << 3) | ((mcr & 0x04) << 4) |
                                     ((mcr & 0x08) << 4));
}

}  // namespace

bool Serial::dlab() const { return (lcr_ & kLcrDlab) != 0; }
bool Serial::loopback() const { return (mcr_ & kMcrLoop) != 0; }

void Serial::read(std::uint64_t offset, std::span<std::uint8_t> data) {
    std::lock_guard lock(mutex_);
    for (auto& byte : data) {
        byte = 0;
    }
    if (!data.empty()) {
        data[0] = read_register(offset);
    }
}

void Serial::write(std::uint64_t offset, std::span<const std::uint8_t> data) {
    std::lock_guard lock(mutex_);
    if (!data.empty()) {
        write_register(offset, data[0]);
    }
}

std::uint8_t Serial::read_register(std::uint64_t offset) {
    switch (offset) {
        case kData: {
            if (dlab()) {
                return dll_;
            }
            if (rx_fifo_.empty()) {
                return 0;
            }
            std::uint8_t byte = rx_fifo_.front();
            rx_fifo_.pop_front();
            if (rx_fifo_.empty()) {
                lsr_ &= static_cast<std::uint8_t>(~kLsrDataReady);
            }
            update_interrupt();
            return byte;
        }
        case kIer: return dlab() ? dlm_ : ier_;
        case kIirFcr: {
            std::uint8_t iir = kIirNone;
            if ((ier_ & kIerRxData) != 0 && !rx_fifo_.empty()) {
                iir = kIirRxData;
            } else if ((ier_ & kIerThrEmpty) != 0 && thr_interrupt_pending_) {
                iir = kIirThrEmpty;
                thr_interrupt_pending_ = false;  // reading IIR acknowledges THRE
            }
            return static_cast<std::uint8_t>(iir | kIirFifoEnabled);
        }
        case kLcr: return lcr_;
        case kMcr: return mcr_;
        case kLsr: return lsr_;
        case kMsr: return loopback() ? loopback_msr(mcr_) : msr_;
        case kScr: return scr_;
        default: return 0;
    }
}

void Serial::write_register(std::uint64_t offset, std::uint8_t value) {
    switch (offset) {
        case kData:
            if (dlab()) {
                dll_ = value;
            } else {
                transmit(value);
            }
            break;
        case kIer:
            if (dlab()) {
                dlm_ = value;
            } else {
                ier_ = value & kIerMask;
                // Enabling THRE while the holder is empty raises it at once;
                // the Linux 8250 driver tests for exactly this.
                thr_interrupt_pending_ = (ier_ & kIerThrEmpty) != 0;
                update_interrupt();
            }
            break;
        case kIirFcr: break;  // FIFO control: our FIFO is always on and never overruns the host
        case kLcr: lcr_ = value; break;
        case kMcr: mcr_ = value; break;
        case kScr: scr_ = value; break;
        default: break;  // LSR and MSR are read-only
    }
}

void Serial::transmit(std::uint8_t byte) {
    if (loopback()) {
        if (rx_fifo_.size() < kRxFifoSize) {
            rx_fifo_.push_back(byte);
            lsr_ |= kLsrDataReady;
        }
    } else if (out_fd_ >= 0) {
        out_buffer_.push_back(static_cast<char>(byte));
        if (byte == '\n' || out_buffer_.size() >= kOutBufferFlush) {
            flush_locked();
        }
    }
    // The byte left at once, so the holding register is empty again.
    lsr_ |= kLsrThrEmpty | kLsrIdle;
    thr_interrupt_pending_ = (ier_ & kIerThrEmpty) != 0;
    update_interrupt();
}

void Serial::update_interrupt() {
    bool rx = (ier_ & kIerRxData) != 0 && !rx_fifo_.empty();
    bool thr = (ier_ & kIerThrEmpty) != 0 && thr_interrupt_pending_;
    if (rx || thr) {
        irq_.trigger();
    }
}

std::size_t Serial::enqueue_input(std::span<const std::uint8_t> bytes) {
    std::lock_guard lock(mutex_);
    if (loopback()) {
        return 0;  // the receiver is disconnected from the line in loopback
    }
    std::size_t accepted = 0;
    for (auto byte : bytes) {
        if (rx_fifo_.size() >= kRxFifoSize) {
            break;
        }
        rx_fifo_.push_back(byte);
        ++accepted;
    }
    if (accepted > 0) {
        lsr_ |= kLsrDataReady;
        update_interrupt();
    }
    return accepted;
}

void Serial::flush() {
    std::lock_guard lock(mutex_);
    flush_locked();
}

void Serial::flush_locked() {
    if (!out_buffer_.empty() && out_fd_ >= 0) {
        // A console that went away (closed pipe) must not stop the guest.
        [[maybe_unused]] auto r = write_all(out_fd_, out_buffer_.data(), out_buffer_.size());
    }
    out_buffer_.clear();
}

Serial::State Serial::save() const {
    std::lock_guard lock(mutex_);
    return State{ier_, lcr_, mcr_, lsr_, msr_, scr_, dll_, dlm_, thr_interrupt_pending_,
                 std::string(rx_fifo_.begin(), rx_fifo_.end())};
}

void Serial::restore(const State& state) {
    std::lock_guard lock(mutex_);
    ier_ = state.ier & kIerMask;
    lcr_ = state.lcr;
    mcr_ = state.mcr;
    lsr_ = state.lsr;
    msr_ = state.msr;
    scr_ = state.scr;
    dll_ = state.dll;
    dlm_ = state.dlm;
    thr_interrupt_pending_ = state.thr_interrupt_pending;
    std::size_t keep = std::min(state.rx_fifo.size(), kRxFifoSize);
    rx_fifo_.assign(state.rx_fifo.begin(), state.rx_fifo.begin() + static_cast<std::ptrdiff_t>(keep));
    // Derived bits follow the FIFO, whatever the saved LSR claimed.
    lsr_ = static_cast<std::uint8_t>((lsr_ & ~kLsrDataReady) | (rx_fifo_.empty() ? 0 : kLsrDataReady));
}

}  // namespace sbx
