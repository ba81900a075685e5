#include "vmm/config.hpp"

#include <toml++/toml.h>

#include <cstdlib>

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
    } else if (spec.starts_with("append:") && spec.size() > 7) {
        c.kind = Kind::File;
        c.path = std::string(spec.substr(7));
        c.append = true;
    } else if (spec.starts_with("socket:") && spec.size() > 7) {
        c.kind = Kind::Socket;
        c.path = std::string(spec.substr(7));
    } else {
        return make_error("console '{}' is not one of stdout, none, file:PATH, append:PATH, socket:PATH", spec);
    }
    return c;
}

namespace {

// "a=1,b=2" into pairs; a piece without '=' continues the previous value
// (so a path may contain commas).
Result<std::vector<std::pair<std::string, std::string>>> parse_options(std::string_view spec, std::string_view what) {
    std::vector<std::pair<std::string, std::string>> out;
    std::size_t pos = 0;
    while (pos <= spec.size()) {
        std::size_t comma = spec.find(',', pos);
        std::string_view piece = spec.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
        std::size_t eq = piece.find('=');
        if (eq == std::string_view::npos) {
            if (out.empty()) {
                return make_error("{} '{}': expected key=value", what, spec);
            }
            out.back().second += ",";
            out.back().second += piece;
        } else {
            out.emplace_back(std::string(piece.substr(0, eq)), std::string(piece.substr(eq + 1)));
        }
        if (comma == std::string_view::npos) {
            break;
        }
        pos = comma + 1;
    }
    return out;
}

}  // namespace

Result<DiskConfig> DiskConfig::parse(std::string_view spec) {
    DiskConfig d;
    // Options are read from the right, so a path may contain commas.
    while (true) {
        std::size_t comma = spec.rfind(',');
        if (comma == std::string_view::npos) {
            break;
        }
        std::string_view option = spec.substr(comma + 1);
        if (option == "ro") {
            d.read_only = true;
        } else if (option == "backing=on" || option == "backing=off") {
            d.allow_backing = option == "backing=on";
        } else if (option != "rw") {
            break;
        }
        spec = spec.substr(0, comma);
    }
    if (spec.empty()) {
        return make_error("disk: expected PATH[,ro][,backing=on]");
    }
    d.path = std::string(spec);
    return d;
}

Result<NetConfig> NetConfig::parse(std::string_view spec) {
    auto options = parse_options(spec, "net");
    if (!options) {
        return options.error();
    }
    NetConfig n;
    for (const auto& [key, value] : *options) {
        if (key == "tap") {
            n.tap = value;
        } else if (key == "mac") {
            n.mac = value;
        } else {
            return make_error("net: unknown option '{}' (expected tap=NAME[,mac=MAC])", key);
        }
    }
    if (n.tap.empty()) {
        return make_error("net: tap=NAME is required");
    }
    return n;
}

Result<VsockConfig> VsockConfig::parse(std::string_view spec) {
    auto options = parse_options(spec, "vsock");
    if (!options) {
        return options.error();
    }
    VsockConfig v;
    bool have_cid = false;
    for (const auto& [key, value] : *options) {
        if (key == "cid") {
            char* end = nullptr;
            v.cid = std::strtoull(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0') {
                return make_error("vsock: cid '{}' is not a number", value);
            }
            have_cid = true;
        } else if (key == "uds") {
            v.uds = value;
        } else {
            return make_error("vsock: unknown option '{}' (expected cid=N,uds=PATH)", key);
        }
    }
    if (!have_cid || v.uds.empty()) {
        return make_error("vsock: cid=N and uds=PATH are both required");
    }
    return v;
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
        {"console", "max_bytes", toml::node_type::integer},
        {"disk", "path", toml::node_type::string},
        {"disk", "read_only", toml::node_type::boolean},
        {"disk", "backing", toml::node_type::boolean},
        {"net", "tap", toml::node_type::string},
        {"net", "mac", toml::node_type::string},
        {"vsock", "cid", toml::node_type::integer},
        {"vsock", "uds", toml::node_type::string},
        {"rng", "enabled", toml::node_type::boolean},
    };
    auto check_keys = [&](std::string_view section, const toml::table& keys) -> Result<void> {
        for (const auto& [name, value] : keys) {
            const Key* known = nullptr;
            for (const auto& k : kKeys) {
                if (k.section == section && k.name == name.str()) {
                    known = &k;
                }
            }
            if (known == nullptr) {
                return make_error("{}: unknown setting {}.{}", source_name, section, name.str());
            }
            if (value.type() != known->type) {
                const char* type = known->type == toml::node_type::integer   ? "an integer"
                                   : known->type == toml::node_type::boolean ? "true or false"
                                                                             : "a string";
                return make_error("{}: {}.{} must be {}", source_name, section, name.str(), type);
            }
        }
        return ok();
    };
    for (const auto& [section, node] : t) {
        if (section.str() == "disk") {
            const toml::array* disk_tables = node.as_array();
            if (disk_tables == nullptr) {
                return make_error("{}: disks are [[disk]] tables", source_name);
            }
            for (const auto& d : *disk_tables) {
                if (d.as_table() == nullptr) {
                    return make_error("{}: disks are [[disk]] tables", source_name);
                }
                if (auto r = check_keys("disk", *d.as_table()); !r) {
                    return r;
                }
            }
            continue;
        }
        const toml::table* keys = node.as_table();
        if (keys == nullptr) {
            return make_error("{}: '{}' must be a [section]", source_name, section.str());
        }
        if (auto r = check_keys(section.str(), *keys); !r) {
            return r;
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
        const auto max_bytes = console.max_bytes;
        console = *c;
        console.max_bytes = max_bytes;
    }
    if (auto v = t["console"]["max_bytes"].value<std::int64_t>()) {
        if (*v < 0) {
            return make_error("{}: [console] max_bytes must not be negative", source_name);
        }
        console.max_bytes = static_cast<std::uint64_t>(*v);
    }
    if (const toml::array* disk_tables = t["disk"].as_array()) {
        for (const auto& d : *disk_tables) {
            const toml::table& table = *d.as_table();
            auto path = table["path"].value<std::string>();
            if (!path || path->empty()) {
                return make_error("{}: every [[disk]] needs a path", source_name);
            }
            disks.push_back(DiskConfig{*path, table["read_only"].value_or(false), table["backing"].value_or(false)});
        }
    }
    if (t["net"].as_table() != nullptr) {
        NetConfig n;
        n.tap = t["net"]["tap"].value_or(std::string());
        n.mac = t["net"]["mac"].value_or(std::string());
        if (n.tap.empty()) {
            return make_error("{}: [net] needs tap", source_name);
        }
        net = n;
    }
    if (t["vsock"].as_table() != nullptr) {
        auto cid = t["vsock"]["cid"].value<std::int64_t>();
        auto uds = t["vsock"]["uds"].value<std::string>();
        if (!cid || *cid < 0 || !uds) {
            return make_error("{}: [vsock] needs cid (a number) and uds", source_name);
        }
        vsock = VsockConfig{static_cast<std::uint64_t>(*cid), *uds};
    }
    if (t["rng"].as_table() != nullptr) {
        rng = t["rng"]["enabled"].value_or(true);
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
    const std::size_t devices = disks.size() + (net ? 1 : 0) + (vsock ? 1 : 0) + (rng ? 1 : 0);
    if (devices > boot::kVirtioMmioMaxDevices) {
        return make_error("{} virtio devices requested; the VM has room for {}", devices, boot::kVirtioMmioMaxDevices);
    }
    if (vsock && (vsock->cid < 3 || vsock->cid > 0xfffffffeULL)) {
        // 0-2 are reserved (hypervisor, local, host) and -1U is VMADDR_CID_ANY.
        return make_error("vsock cid {} is invalid: guest CIDs are 3 to 4294967294", vsock->cid);
    }
    return ok();
}

}  // namespace sbx
