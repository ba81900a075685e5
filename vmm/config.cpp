#include "vmm/config.hpp"

#include <toml++/toml.h>

#include "vmm/boot/layout.hpp"
#include "vmm/boot/mptable.hpp"

namespace sbx {

Result<ConsoleConfig> ConsoleConfig::parse(std::string_view spec) {
    ConsoleConfig c;
    if (spec == "stdout") {
        c.kind = Kind::Stdout;
    } else if (spec == "none") {
        c.kind = Kind::None;
    } else if (spec.starts_with("file:") && spec.size() > 5) {
        c.kind = Kind::File;
        c.path = std::string(spec.substr(5));
    } else if (spec.starts_with("socket:") && spec.size() > 7) {
        c.kind = Kind::Socket;
        c.path = std::string(spec.substr(7));
    } else {
        return make_error("console '{}' is not one of stdout, none, file:PATH, socket:PATH", spec);
    }
    return c;
}

Result<void> VmConfig::merge_toml(std::string_view toml_text, std::string_view source_name) {
    toml::table t;
    try {
        t = toml::parse(toml_text, source_name);
    } catch (const toml::parse_error& err) {
        // toml++ reports syntax errors by exception; they stop here.
        return make_error("{}:{}:{}: {}", source_name, err.source().begin.line, err.source().begin.column,
                          err.description());
    }
    // Every section and key is known and typed: a typo is an error, not a
    // silently ignored setting.
    struct Key {
        std::string_view section, name;
        toml::node_type type;
    };
    static constexpr Key kKeys[] = {
        {"machine", "cpus", toml::node_type::integer},
        {"machine", "memory_mib", toml::node_type::integer},
        {"boot", "kernel", toml::node_type::string},
        {"boot", "initrd", toml::node_type::string},
        {"boot", "cmdline", toml::node_type::string},
        {"console", "output", toml::node_type::string},
    };
    for (const auto& [section, node] : t) {
        const toml::table* keys = node.as_table();
        if (keys == nullptr) {
            return make_error("{}: '{}' must be a [section]", source_name, section.str());
        }
        for (const auto& [name, value] : *keys) {
            const Key* known = nullptr;
            for (const auto& k : kKeys) {
                if (k.section == section.str() && k.name == name.str()) {
                    known = &k;
                }
            }
            if (known == nullptr) {
                return make_error("{}: unknown setting {}.{}", source_name, section.str(), name.str());
            }
            if (value.type() != known->type) {
                return make_error("{}: {}.{} must be {}", source_name, section.str(), name.str(),
                                  known->type == toml::node_type::integer ? "an integer" : "a string");
            }
        }
    }
    if (auto v = t["machine"]["cpus"].value<std::int64_t>()) {
        if (*v < 0 || *v > 1024) {
            return make_error("{}: machine.cpus = {} is out of range", source_name, *v);
        }
        cpus = static_cast<unsigned>(*v);
    }
    if (auto v = t["machine"]["memory_mib"].value<std::int64_t>()) {
        if (*v < 0) {
            return make_error("{}: machine.memory_mib = {} is negative", source_name, *v);
        }
        memory_mib = static_cast<std::uint64_t>(*v);
    }
    if (auto v = t["boot"]["kernel"].value<std::string>()) {
        kernel = *v;
    }
    if (auto v = t["boot"]["initrd"].value<std::string>()) {
        initrd = *v;
    }
    if (auto v = t["boot"]["cmdline"].value<std::string>()) {
        cmdline = *v;
    }
    if (auto v = t["console"]["output"].value<std::string>()) {
        auto c = ConsoleConfig::parse(*v);
        if (!c) {
            return c.error().context(source_name);
        }
        console = *c;
    }
    return ok();
}

Result<void> VmConfig::validate() const {
    if (kernel.empty()) {
        return make_error("no kernel given (--kernel or [boot] kernel)");
    }
    if (cpus == 0 || cpus > boot::kMpTableMaxCpus) {
        return make_error("{} vCPUs requested; the VM needs 1 to {}", cpus, boot::kMpTableMaxCpus);
    }
    constexpr std::uint64_t kMib = 1ULL << 20;
    if (memory_mib < boot::kMinGuestMemory / kMib) {
        return make_error("{} MiB of memory requested; the minimum is {} MiB", memory_mib,
                          boot::kMinGuestMemory / kMib);
    }
    if (memory_mib > (1ULL << 46) / kMib) {
        return make_error("{} MiB of memory requested; more than this VMM maps", memory_mib);
    }
    return ok();
}

}  // namespace sbx
