#include "base/log_budget.hpp"

namespace sbx {

bool LogBudget::take(std::uint64_t& held_back, Clock::time_point now) {
    if (spent_ < burst_ || now - last_ >= interval_) {
        spent_ += spent_ < burst_ ? 1 : 0;
        last_ = now;
        held_back = held_back_;
        held_back_ = 0;
        return true;
    }
    ++held_back_;
    return false;
}

}  // namespace sbx
