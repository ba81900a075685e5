// Boost.URL's definitions, compiled once here (its header-only mode).
#include <boost/url/src.hpp>
