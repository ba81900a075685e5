#include "devices/legacy/i8042.hpp"

namespace sbx {

namespace {

// Status register bits and controller commands (IBM PS/2 Technical Reference,
// "Keyboard/Auxiliary Device Controller"; Linux drivers/input/serio/i8042.h).
constexpr std::uint8_t kStatusOutputFull = 0x01;
constexpr std::uint8_t kStatusCommand = 0x08;
constexpr std::uint8_t kControlKbdInt = 0x01;

constexpr std::uint8_t kCmdReadControl = 0x20;
constexpr std::uint8_t kCmdWriteControl = 0x60;
constexpr std::uint8_t kCmdAuxTest = 0xa9;
constexpr std::uint8_t kCmdSelfTest = 0xaa;
constexpr std::uint8_t kCmdKbdTest = 0xab;
constexpr std::uint8_t kCmdReadOutputPort = 0xd0;
constexpr std::uint8_t kCmdWriteOutputPort = 0xd1;
constexpr std::uint8_t kCmdWriteKbdOutput = 0xd2;
constexpr std::uint8_t kCmdPulseReset = 0xfe;

constexpr std::uint8_t kSelfTestPassed = 0x55;
constexpr std::uint8_t kKbdAck = 0xfa;
constexpr std::uint8_t kKbdReset = 0xff;
constexpr std::uint8_t kKbdSelfTestPassed = 0xaa;

constexpr std::uint64_t kDataOffset = 0;
constexpr std::uint64_t kCommandOffset = 4;

}  // namespace

void I8042::read(std::uint64_t offset, std::span<std::uint8_t> data) {
    std::lock_guard lock(mutex_);
    std::uint8_t value = 0;
    if (offset == kDataOffset) {
        if (!output_.empty()) {
            value = output_.front();
            output_.pop_front();
        }
        if (output_.empty()) {
            status_ &= static_cast<std::uint8_t>(~kStatusOutputFull);
        } else if ((control_ & kControlKbdInt) != 0) {
            irq_.trigger();
        }
    } else if (offset == kCommandOffset) {
        value = status_;
    }
    for (auto& b : data) {
        b = 0;
    }
    if (!data.empty()) {
        data[0] = value;
    }
}

void I8042::write(std::uint64_t offset, std::span<const std::uint8_t> data) {
    if (data.empty()) {
        return;
    }
    bool reset = false;
    {
        std::lock_guard lock(mutex_);
        if (offset == kCommandOffset) {
            status_ |= kStatusCommand;
            if (data[0] == kCmdPulseReset) {
                reset = true;
            } else {
                command(data[0]);
            }
        } else if (offset == kDataOffset) {
            status_ &= static_cast<std::uint8_t>(~kStatusCommand);
            if (pending_command_ == kCmdWriteOutputPort && (data[0] & 0x01) == 0) {
                reset = true;  // the output port's bit 0 drives the CPU reset line
            }
            data_write(data[0]);
        }
    }
    if (reset && on_reset_) {
        on_reset_();
    }
}

void I8042::command(std::uint8_t cmd) {
    switch (cmd) {
        case kCmdReadControl: push_output(control_); break;
        case kCmdWriteControl:
        case kCmdWriteOutputPort:
        case kCmdWriteKbdOutput: pending_command_ = cmd; break;
        case kCmdSelfTest: push_output(kSelfTestPassed); break;
        case kCmdKbdTest:
        case kCmdAuxTest: push_output(0x00); break;
        case kCmdReadOutputPort: push_output(output_port_); break;
        default: break;  // enable/disable ports and the like need no answer
    }
}

void I8042::data_write(std::uint8_t value) {
    std::uint8_t cmd = pending_command_;
    pending_command_ = 0;
    switch (cmd) {
        case kCmdWriteControl: control_ = value; break;
        case kCmdWriteOutputPort: output_port_ = value; break;
        case kCmdWriteKbdOutput: push_output(value); break;
        default:
            // A byte for the keyboard itself: acknowledge it; a reset also
            // reports a passed self-test.
            push_output(kKbdAck);
            if (value == kKbdReset) {
                push_output(kKbdSelfTestPassed);
            }
            break;
    }
}

void I8042::push_output(std::uint8_t byte) {
    if (output_.size() >= kOutputLimit) {
        return;  // a guest that never reads cannot grow us
    }
    output_.push_back(byte);
    status_ |= kStatusOutputFull;
    if ((control_ & kControlKbdInt) != 0) {
        irq_.trigger();
    }
}

I8042::State I8042::save() const {
    std::lock_guard lock(mutex_);
    return State{status_, control_, output_port_, pending_command_, {output_.begin(), output_.end()}};
}

namespace {

Result<void> check(const I8042::State& state) {
    const std::uint8_t p = state.pending_command;
    if (p != 0 && p != kCmdWriteControl && p != kCmdWriteOutputPort && p != kCmdWriteKbdOutput) {
        return make_error("i8042 state: command {:#x} does not wait for a data byte", p);
    }
    if (state.output.size() > I8042::kOutputLimit) {
        return make_error("i8042 state: {} output bytes, at most {} are buffered", state.output.size(),
                          I8042::kOutputLimit);
    }
    return ok();
}

}  // namespace

Result<void> I8042::restore(const State& state) {
    if (auto r = check(state); !r) {
        return r;
    }
    std::lock_guard lock(mutex_);
    control_ = state.control;
    output_port_ = state.output_port;
    pending_command_ = state.pending_command;
    output_.assign(state.output.begin(), state.output.end());
    // Output full follows the buffer, whatever the saved status claimed.
    status_ = static_cast<std::uint8_t>((state.status & ~kStatusOutputFull) |
                                        (output_.empty() ? 0 : kStatusOutputFull));
    if (!output_.empty() && (control_ & kControlKbdInt) != 0) {
        irq_.trigger();  // the new VM's irqfd has seen no edge
    }
    return ok();
}

void I8042::State::encode(ByteWriter& out) const {
    out.u16(kVersion);
    out.u8(status);
    out.u8(control);
    out.u8(output_port);
    out.u8(pending_command);
    out.blob(output);
}

Result<I8042::State> I8042::State::decode(ByteReader& in) {
    const std::uint16_t version = in.u16();
    if (!in.failed() && version != kVersion) {
        return make_error("i8042 state version {} is not {}", version, kVersion);
    }
    State s;
    s.status = in.u8();
    s.control = in.u8();
    s.output_port = in.u8();
    s.pending_command = in.u8();
    const auto output = in.blob(kOutputLimit);
    if (in.failed()) {
        return in.finish("i8042 state").error();
    }
    s.output.assign(output.begin(), output.end());
    if (auto r = check(s); !r) {
        return r.error();
    }
    return s;
}

}  // namespace sbx
