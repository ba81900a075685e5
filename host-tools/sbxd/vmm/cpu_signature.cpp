#include "host-tools/sbxd/vmm/cpu_signature.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "host-tools/sbxd/crypto/random.hpp"

namespace sbx::sbxd {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
        s.remove_suffix(1);
    }
    return s;
}

}  // namespace

Result<std::string> cpu_signature_of(std::string_view cpuinfo) {
    // proc(5): "key<TAB>: value" lines, one block per processor; the first will do.
    std::map<std::string, std::string, std::less<>> fields;
    std::istringstream in{std::string(cpuinfo)};
    for (std::string line; std::getline(in, line);) {
        if (trim(line).empty()) {
            if (!fields.empty()) {
                break;
            }
            continue;
        }
        const auto colon = line.find(':');
        if (colon == std::string::npos) {
            continue;
        }
        fields.emplace(std::string(trim(std::string_view(line).substr(0, colon))),
                       std::string(trim(std::string_view(line).substr(colon + 1))));
    }
    auto field = [&](std::string_view key) {
        auto it = fields.find(key);
        return it == fields.end() ? std::string() : it->second;
    };
    const std::string vendor = field("vendor_id");
    if (vendor.empty()) {
        return make_coded_error("not_found", "no vendor_id in /proc/cpuinfo");
    }
    std::set<std::string> flags;
    std::istringstream words(field("flags"));
    for (std::string w; words >> w;) {
        flags.insert(w);
    }
    std::string joined;
    for (const auto& f : flags) {
        joined += f + " ";
    }
    return fmt::format("{}/{}/{}/{}/{}", vendor, field("cpu family"), field("model"), field("stepping"),
                       sha256_hex(joined).substr(0, 16));
}

Result<std::string> host_cpu_signature() {
    std::ifstream in("/proc/cpuinfo");
    if (!in) {
        return make_error("reading /proc/cpuinfo");
    }
    std::stringstream text;
    text << in.rdbuf();
    return cpu_signature_of(text.str());
}

Result<void> write_cpu_signature(const std::string& memory_snapshot, const std::string& signature) {
    const std::string path = cpu_signature_file(memory_snapshot);
    const std::string temp = path + ".tmp";
    {
        std::ofstream out(temp, std::ios::trunc);
        out << signature << "\n";
        if (!out.flush()) {
            return make_error("writing {}", temp);
        }
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        return sys_error("renaming {}", temp);
    }
    return ok();
}

std::string read_cpu_signature(const std::string& memory_snapshot) {
    std::ifstream in(cpu_signature_file(memory_snapshot));
    std::string line;
    std::getline(in, line);
    return std::string(trim(line));
}

}  // namespace sbx::sbxd
