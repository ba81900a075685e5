// The one place <linux/kvm.h> is included, for the KVM layer's .cpp files.
//
// linux-libc-dev 6.1 (Debian 12) declares flexible arrays with
// __DECLARE_FLEX_ARRAY, whose C++ expansion adds an empty struct of size 1:
// sizeof(kvm_cpuid2) becomes 12 instead of 8, and with it the ioctl numbers
// of KVM_GET_SUPPORTED_CPUID, KVM_SET_CPUID2, KVM_GET/SET_MSRS and others,
// which the kernel then rejects with EINVAL. Declare them as the kernel does.
#pragma once

#include <linux/stddef.h>

#undef __DECLARE_FLEX_ARRAY
#define __DECLARE_FLEX_ARRAY(TYPE, NAME) TYPE NAME[0]

// Zero-length arrays are the GNU extension the kernel's own headers rely on.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <linux/kvm.h>
#pragma GCC diagnostic pop

static_assert(sizeof(kvm_cpuid2) == 8, "kvm_cpuid2 must match the kernel ABI");
static_assert(sizeof(kvm_msrs) == 8, "kvm_msrs must match the kernel ABI");
static_assert(sizeof(kvm_msr_list) == 4, "kvm_msr_list must match the kernel ABI");
static_assert(KVM_GET_SUPPORTED_CPUID == 0xc008ae05, "ioctl number must match the kernel ABI");
static_assert(sizeof(kvm_xsave) == 4096, "kvm_xsave must match the kernel ABI (extra[] is a flexible array)");
