// Boost.URL's definitions, compiled once for sbx (its header-only mode).
#include <boost/url/src.hpp>
