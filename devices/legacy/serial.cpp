#include "devices/legacy/serial.hpp"

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
constexpr std::uint8_t kIirFifoEnabled = 0xc0;  // a 16550A with its FIFOs on
constexpr std::uint8_t kFcrEnable = 0x01;
constexpr std::uint8_t kFcrClearRx = 0x02;
constexpr std::uint8_t kLcrDlab = 0x80;
constexpr std::uint8_t kMcrLoop = 0x10;
constexpr std::uint8_t kLsrDataReady = 0x01;
constexpr std::uint8_t kLsrThrEmpty = 0x20;
constexpr std::uint8_t kLsrIdle = 0x40;

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
            update_interrupt();
            return static_cast<std::uint8_t>(iir | (fifo_enabled_ ? kIirFifoEnabled : 0));
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
        case kIirFcr:
            // FIFO control: the receive FIFO is always 64 deep here, but
            // enable and clear behave as on the PC16550D (Linux clears the
            // FIFOs when it opens the port).
            fifo_enabled_ = (value & kFcrEnable) != 0;
            if ((value & kFcrClearRx) != 0) {
                rx_fifo_.clear();
                lsr_ &= static_cast<std::uint8_t>(~kLsrDataReady);
                update_interrupt();
            }
            break;
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
    } else if (out_buffer_.size() >= kOutputLimit) {
        ++dropped_output_;
    } else {
        bool was_empty = out_buffer_.empty();
        out_buffer_.push_back(static_cast<char>(byte));
        if (was_empty && on_output_) {
            on_output_();
        }
    }
    // The byte left at once, so the holding register is empty again.
    lsr_ |= kLsrThrEmpty | kLsrIdle;
    thr_interrupt_pending_ = (ier_ & kIerThrEmpty) != 0;
    update_interrupt();
}

// The UART's INTR output is a level; the irqfd delivers an edge, so only a
// low-to-high transition triggers it (once per interrupt the driver sees).
void Serial::update_interrupt() {
    bool rx = (ier_ & kIerRxData) != 0 && !rx_fifo_.empty();
    bool thr = (ier_ & kIerThrEmpty) != 0 && thr_interrupt_pending_;
    bool level = rx || thr;
    if (level && !interrupt_level_) {
        irq_.trigger();
    }
    interrupt_level_ = level;
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

void Serial::take_output(std::string& out) {
    std::lock_guard lock(mutex_);
    out.append(out_buffer_);
    out_buffer_.clear();
}

std::uint64_t Serial::dropped_output_bytes() const {
    std::lock_guard lock(mutex_);
    return dropped_output_;
}

Serial::State Serial::save() const {
    std::lock_guard lock(mutex_);
    return State{ier_, lcr_, mcr_, lsr_, msr_, scr_, dll_, dlm_, fifo_enabled_, thr_interrupt_pending_,
                 std::string(rx_fifo_.begin(), rx_fifo_.end())};
}

namespace {

Result<void> check(const Serial::State& state) {
    if ((state.ier & ~kIerMask) != 0) {
        return make_error("serial state: IER {:#x} has bits a 16550A does not have", state.ier);
    }
    if (state.rx_fifo.size() > Serial::kRxFifoSize) {
        return make_error("serial state: {} bytes in a {}-byte receive FIFO", state.rx_fifo.size(),
                          Serial::kRxFifoSize);
    }
    return ok();
}

}  // namespace

Result<void> Serial::restore(const State& state) {
    if (auto r = check(state); !r) {
        return r;
    }
    std::lock_guard lock(mutex_);
    ier_ = state.ier;
    lcr_ = state.lcr;
    mcr_ = state.mcr;
    msr_ = state.msr;
    scr_ = state.scr;
    dll_ = state.dll;
    dlm_ = state.dlm;
    fifo_enabled_ = state.fifo_enabled;
    thr_interrupt_pending_ = state.thr_interrupt_pending;
    rx_fifo_.assign(state.rx_fifo.begin(), state.rx_fifo.end());
    // Data ready follows the FIFO, whatever the saved LSR claimed.
    lsr_ = static_cast<std::uint8_t>((state.lsr & ~kLsrDataReady) | (rx_fifo_.empty() ? 0 : kLsrDataReady));
    // The new VM's irqfd has seen no edge: a pending interrupt raises it.
    interrupt_level_ = false;
    update_interrupt();
    return ok();
}

void Serial::State::encode(ByteWriter& out) const {
    out.u16(kVersion);
    for (std::uint8_t reg : {ier, lcr, mcr, lsr, msr, scr, dll, dlm}) {
        out.u8(reg);
    }
    out.boolean(fifo_enabled);
    out.boolean(thr_interrupt_pending);
    out.string(rx_fifo);
}

Result<Serial::State> Serial::State::decode(ByteReader& in) {
    const std::uint16_t version = in.u16();
    if (!in.failed() && version != kVersion) {
        return make_error("serial state version {} is not {}", version, kVersion);
    }
    State s;
    for (std::uint8_t* reg : {&s.ier, &s.lcr, &s.mcr, &s.lsr, &s.msr, &s.scr, &s.dll, &s.dlm}) {
        *reg = in.u8();
    }
    s.fifo_enabled = in.boolean();
    s.thr_interrupt_pending = in.boolean();
    s.rx_fifo = in.string(kRxFifoSize);
    if (in.failed()) {
        return in.finish("serial state").error();
    }
    if (auto r = check(s); !r) {
        return r.error();
    }
    return s;
}

}  // namespace sbx
