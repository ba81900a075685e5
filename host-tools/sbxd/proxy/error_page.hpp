// Sandboxer's own answers on a hosted port (docs/sbxd.md, "Hosted
// ports"): a short HTML page whose visible text ends with
// "Sandboxer · HTTP <status>", so a person (or a test) can tell them from
// the app's.
#pragma once

#include <string>
#include <string_view>

namespace sbx::sbxd::proxy {

// The page for status (the reason phrase as its heading) with a one-line
// explanation; the explanation is HTML-escaped.
[[nodiscard]] std::string error_page(unsigned status, std::string_view explanation);

// "&<>\"'" as character references.
[[nodiscard]] std::string html_escape(std::string_view text);

}  // namespace sbx::sbxd::proxy
