// METH_FASTCALL entry points for the hottest methods (enter, exit), the only
// bindings of Collector.enter / Collector.exit: pybind11's generic dispatcher
// (overload lookup, per-argument casters, keyword matching) costs more than
// enter/exit themselves, and integrations call these twice per operator.
#pragma once

#include <pybind11/pybind11.h>

namespace dc {

// Adds Collector.enter / Collector.exit to `cls` (the bound class).
void install_fastcall(pybind11::handle cls);

}  // namespace dc
