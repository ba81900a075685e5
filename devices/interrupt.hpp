// An edge-triggered interrupt line a device raises (backed by an irqfd in
// the VMM, by a counter in tests).
#pragma once

namespace sbx {

class InterruptLine {
public:
    virtual ~InterruptLine() = default;
    virtual void trigger() = 0;
};

}  // namespace sbx
