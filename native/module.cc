// pybind11 bindings: argument checking (args.h) and conversion to flat Python
// values, nothing else; enter and exit are bound in fastcall.cc. All methods
// run with the GIL held (pybind11's default); the GIL is not what guards the
// collector's state (other threads record without it): each part takes the
// store's mutex where it needs it (store.h, collector.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "args.h"
#include "collector.h"
#include "fastcall.h"
#include "unwind.h"

namespace py = pybind11;
using dc::Collector;

namespace {

// Raises the Python exception an args.h check set.
void require(bool ok) {
  if (!ok) throw py::error_already_set();
}

// array('q') built from one bytes buffer: one memcpy instead of a Python int
// per element, which is what keeps a 100k-node snapshot in milliseconds.
py::object int64_array(const int64_t* data, size_t n, size_t padded) {
  static py::object array_type = py::module_::import("array").attr("array");
  py::bytes raw(nullptr, 0);
  PyObject* b = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(padded * 8));
  if (b == nullptr) throw py::error_already_set();
  char* dst = PyBytes_AS_STRING(b);
  if (n > 0) std::memcpy(dst, data, n * 8);
  std::memset(dst + n * 8, 0, (padded - n) * 8);
  raw = py::reinterpret_steal<py::bytes>(b);
  return array_type("q", raw);
}

py::object int64_array(const std::vector<int64_t>& v) {
  return int64_array(v.data(), v.size(), v.size());
}

py::dict snapshot(Collector& c) {
  // Operators on other threads may still be closing (capture is stopped
  // first, but an op already past its check finishes its add).
  std::unique_lock<std::mutex> still = c.hold();
  const dc::Tree& t = c.tree();
  const size_t nodes = static_cast<size_t>(t.node_count());
  py::dict out;
  out["parent"] = int64_array(t.parents());
  out["frame"] = int64_array(t.frames());
  py::dict metrics, units;
  for (size_t i = 0; i < t.metric_count(); ++i) {
    const std::vector<int64_t>& col = t.raw_column(i);
    size_t n = col.size() < nodes ? col.size() : nodes;
    metrics[py::str(t.metric_name(i))] = int64_array(col.data(), n, nodes);
    units[py::str(t.metric_name(i))] = py::str(t.metric_unit(i));
  }
  out["metrics"] = metrics;
  out["units"] = units;
  if (t.steps_marked() > 0) {
    py::dict bounds;
    bounds["cpu_time_ns.min"] = int64_array(t.step_min().data(), t.step_min().size(), nodes);
    bounds["cpu_time_ns.max"] = int64_array(t.step_max().data(), t.step_max().size(), nodes);
    out["step_bounds"] = bounds;
    out["steps_marked"] = py::int_(t.steps_marked());
  }

  const std::vector<dc::Frame>& all = c.frames().all();
  std::vector<int64_t> cols[6];
  for (auto& col : cols) col.reserve(all.size());
  for (const dc::Frame& f : all) {
    cols[0].push_back(f.kind);
    cols[1].push_back(f.name);
    cols[2].push_back(f.file);
    cols[3].push_back(f.line);
    cols[4].push_back(f.detail);
    cols[5].push_back(f.flags);
  }
  py::dict frames;
  const char* names[6] = {"kind", "name", "file", "line", "detail", "flags"};
  for (int i = 0; i < 6; ++i) frames[names[i]] = int64_array(cols[i]);
  out["frames"] = frames;

  const dc::StringTable& st = c.strings();
  PyObject* strings = PyList_New(static_cast<Py_ssize_t>(st.size()));
  if (strings == nullptr) throw py::error_already_set();
  py::list strings_list = py::reinterpret_steal<py::list>(strings);
  for (size_t i = 0; i < st.size(); ++i) {
    const std::string& s = st.at(static_cast<int64_t>(i));
    PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
    if (u == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(strings, static_cast<Py_ssize_t>(i), u);
  }
  out["strings"] = strings_list;

  py::dict drops;
  drops["nodes"] = t.dropped_nodes();
  drops["samples"] = c.dropped_samples();
  drops["monitor"] = c.monitor().dropped();
  out["drops"] = drops;
  return out;
}

py::dict monitor_samples(Collector& c) {
  std::vector<dc::MonitorSample> samples = c.monitor().samples();
  py::list t, cpu, rss, mem, rd, wr, rx, tx, gpu, gmem;
  for (const dc::MonitorSample& s : samples) {
    t.append(s.t_ns);
    cpu.append(py::cast(s.cpu_percent));
    rss.append(s.rss_bytes);
    mem.append(s.mem_used_percent);
    rd.append(s.disk_read_bytes);
    wr.append(s.disk_write_bytes);
    rx.append(s.net_rx_bytes);
    tx.append(s.net_tx_bytes);
    gpu.append(py::cast(s.gpu_util_percent));
    gmem.append(py::cast(s.gpu_mem_bytes));
  }
  py::dict out;
  out["t_ns"] = t;
  out["cpu_percent"] = cpu;
  out["rss_bytes"] = rss;
  out["mem_used_percent"] = mem;
  out["disk_read_bytes"] = rd;
  out["disk_write_bytes"] = wr;
  out["net_rx_bytes"] = rx;
  out["net_tx_bytes"] = tx;
  out["gpu_util_percent"] = gpu;
  out["gpu_mem_bytes"] = gmem;
  return out;
}

}  // namespace

// The memory tracker's readout (memory.h) as plain Python data.
py::dict memory_snapshot(Collector& c) {
  const dc::MemoryReadout r = c.memory().snapshot();
  py::list devices;
  for (const dc::DeviceMemory& d : r.devices) {
    py::dict peak;
    for (int k = 0; k < dc::kCategories; ++k) peak[dc::kCategoryNames[k]] = d.peak_bytes[k];
    py::dict out;
    out["type"] = d.type;
    out["index"] = d.index;
    out["alloc_bytes"] = d.alloc_bytes;
    out["free_bytes"] = d.free_bytes;
    out["peak_bytes"] = peak;
    out["peak"] = d.peak;
    out["peak_ns"] = d.peak_ns;
    out["peak_node"] = d.peak_node;
    out["held_at_peak"] = d.held_at_peak;
    out["allocator_peak"] = d.allocator_peak;
    out["max_reserved"] = d.max_reserved;
    out["live"] = d.live;
    out["timeline_ns"] = d.timeline_ns;
    out["timeline_bytes"] = d.timeline_bytes;
    out["live_dropped"] = d.live_dropped;
    out["unknown_frees"] = d.unknown_frees;
    devices.append(out);
  }
  py::dict out;
  out["devices"] = devices;
  out["bad_reports"] = r.bad_reports;
  return out;
}

PYBIND11_MODULE(_native, m) {
  m.doc() = "DeepContext native collector; the contract is dc_core/_native.pyi.";
  m.attr("KIND_ROOT") = static_cast<int>(dc::KIND_ROOT);
  m.attr("KIND_PYTHON") = static_cast<int>(dc::KIND_PYTHON);
  m.attr("KIND_MODULE") = static_cast<int>(dc::KIND_MODULE);
  m.attr("KIND_OPERATOR") = static_cast<int>(dc::KIND_OPERATOR);
  m.attr("KIND_NATIVE") = static_cast<int>(dc::KIND_NATIVE);
  m.attr("KIND_KERNEL") = static_cast<int>(dc::KIND_KERNEL);
  m.attr("KIND_PHASE") = static_cast<int>(dc::KIND_PHASE);
  m.attr("KIND_COMPILED") = static_cast<int>(dc::KIND_COMPILED);
  m.attr("KIND_SHARDING") = static_cast<int>(dc::KIND_SHARDING);
  m.attr("FLAG_BACKWARD") = static_cast<int>(dc::FLAG_BACKWARD);
  m.attr("METRIC_CPU_TIME") = static_cast<int>(dc::METRIC_CPU_TIME);
  m.attr("METRIC_COUNT") = static_cast<int>(dc::METRIC_COUNT);
  m.attr("METRIC_SAMPLES") = static_cast<int>(dc::METRIC_SAMPLES);
  m.def("now_ns", &dc::now_ns, "Monotonic clock (CLOCK_MONOTONIC) in nanoseconds.");
  m.def(
      "demangle", [](const std::string& name) { return dc::demangle(name.c_str()); },
      py::arg("name"), "The collector's C++ demangler (names from ELF symbol tables).");
  m.def(
      "symbol_at",
      [](uintptr_t addr) -> py::object {
        // Called with the GIL held: one index, read by one thread at a time.
        static dc::SymbolIndex index;
        dc::SymbolIndex::Hit hit;
        switch (index.lookup(addr, &hit)) {
          case dc::SymbolIndex::FOUND:
            return py::make_tuple(*hit.file, hit.base, py::bytes(hit.name), hit.start);
          case dc::SymbolIndex::NO_NAME:
            return py::make_tuple(*hit.file, hit.base, py::none(), py::none());
          case dc::SymbolIndex::UNKNOWN:
            return py::none();
          case dc::SymbolIndex::ASK:
            break;
        }
        return py::str("ask");
      },
      py::arg("address"),
      "What the sampler's symbol index answers for an address, as dladdr's Dl_info: "
      "(file, base, mangled name or None, symbol address or None); None outside every "
      "loaded object; 'ask' where the index defers to dladdr.");

  // Threads must be stopped while the interpreter is still whole: atexit
  // callbacks run before finalization, Py_AtExit ones after it.
  m.def("_stop_all", &dc::stop_all_collectors);
  py::module_::import("atexit").attr("register")(m.attr("_stop_all"));

  py::class_<Collector> cls(m, "Collector");
  cls.def(py::init([](int64_t max_nodes, int64_t max_samples) {
            if (max_nodes < 1)
              throw py::value_error("max_nodes must be >= 1, got " + std::to_string(max_nodes));
            if (max_samples < 0)
              throw py::value_error("max_samples must be >= 0, got " + std::to_string(max_samples));
            return new Collector(max_nodes, max_samples);
          }),
          py::arg("max_nodes") = 500000, py::arg("max_samples") = 100000)
      .def("intern", &Collector::intern, py::arg("kind"), py::arg("name"), py::arg("file") = "",
           py::arg("line") = 0, py::arg("detail") = "", py::arg("flags") = 0)
      .def("skip_prefix", &Collector::skip_prefix, py::arg("prefix"))
      .def(
          "metric",
          [](Collector& c, const std::string& name, const std::string& unit) {
            int64_t id = c.metric(name, unit);
            if (id < 0)
              throw py::value_error("metric " + name + " is registered with another unit");
            return id;
          },
          py::arg("name"), py::arg("unit"))
      .def(
          "child",
          [](Collector& c, int64_t parent, int64_t frame) {
            require(dc::check_node(c, parent) && dc::check_frame(c, frame));
            return c.child(parent, frame);
          },
          py::arg("parent"), py::arg("frame"))
      .def(
          "path",
          [](Collector& c, int64_t parent, py::handle frames) {
            static std::vector<int64_t> ids;  // GIL-protected scratch
            require(dc::check_node(c, parent) && dc::read_frames(frames.ptr(), c, &ids));
            return c.path(parent, ids.data(), ids.size());
          },
          py::arg("parent"), py::arg("frames"))
      .def(
          "mirror",
          [](Collector& c, int64_t node, int64_t top) {
            require(dc::check_node(c, node) && dc::check_node(c, top));
            return c.mirror(node, top);
          },
          py::arg("node"), py::arg("top"))
      .def(
          "parent",
          [](Collector& c, int64_t node) {
            require(dc::check_node(c, node));
            return c.parent(node);
          },
          py::arg("node"))
      .def(
          "add",
          [](Collector& c, int64_t node, int64_t metric, int64_t value) {
            require(dc::check_node(c, node));
            if (!c.tree().valid_metric(metric))
              throw py::index_error("no metric " + std::to_string(metric));
            c.add(node, metric, value);
          },
          py::arg("node"), py::arg("metric"), py::arg("value"))
      .def("node_count", [](Collector& c) { return c.tree().node_count(); })
      .def("python_frames",
           [](Collector& c) {
             std::vector<int64_t> out;
             c.python_frames(&out);
             PyObject* list = PyList_New(static_cast<Py_ssize_t>(out.size()));
             if (list == nullptr) throw py::error_already_set();
             for (size_t i = 0; i < out.size(); ++i)
               PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(out[i]));
             return py::reinterpret_steal<py::list>(list);
           })
      .def("exit_own", &Collector::exit_own)
      .def("top", &Collector::top)
      .def("depth", &Collector::depth)
      .def("unwind", &Collector::unwind, py::arg("depth"))
      .def("lend", &Collector::lend, py::arg("thread"), py::arg("start_ns"), py::arg("end_ns"))
      .def(
          "start_sampler",
          [](Collector& c, double hz, bool native) {
            if (!(hz > 0)) throw py::value_error("hz must be > 0, got " + std::to_string(hz));
            c.start_sampler(hz, native);
          },
          py::arg("hz"), py::arg("native") = false)
      .def("stop_sampler", &Collector::stop_sampler)
      .def("sampler_running", &Collector::sampler_running)
      .def(
          "start_monitor",
          [](Collector& c, int64_t interval_ms) {
            if (interval_ms <= 0)
              throw py::value_error("interval_ms must be > 0, got " + std::to_string(interval_ms));
            c.start_monitor(interval_ms);
          },
          py::arg("interval_ms"))
      .def("stop_monitor", &Collector::stop_monitor)
      .def("monitor_samples", &monitor_samples)
      .def("snapshot", &snapshot)
      .def("mark_step", &Collector::mark_step)
      .def("reset", &Collector::reset)
      .def(
          "capture_start",
          [](Collector& c, int64_t backward_frame, bool nested, py::object context_code,
             py::object namer, bool gil_free, int64_t unscoped_frame) {
            require(dc::check_frame(c, backward_frame));
            if (unscoped_frame != -1) require(dc::check_frame(c, unscoped_frame));
            if (!context_code.is_none() && !PyCode_Check(context_code.ptr()))
              throw py::type_error("context_code must be a code object or None");
            if (!namer.is_none() && !PyCallable_Check(namer.ptr()))
              throw py::type_error("namer must be callable or None");
            return c.capture_start(
                backward_frame, nested, context_code.is_none() ? nullptr : context_code.ptr(),
                namer.is_none() ? nullptr : namer.ptr(), gil_free, unscoped_frame);
          },
          py::arg("backward_frame"), py::arg("nested"), py::arg("context_code"), py::arg("namer"),
          py::arg("gil_free") = true, py::arg("unscoped_frame") = -1)
      .def("capture_stop", &Collector::capture_stop)
      .def("capture_suspend", &Collector::capture_suspend, py::arg("delta"))
      .def(
          "capture_seq",
          [](Collector& c, uint64_t thread, int64_t first, int64_t last, int64_t node) {
            require(dc::check_node(c, node));
            c.capture_seq(thread, first, last, node);
          },
          py::arg("thread"), py::arg("first"), py::arg("last"), py::arg("node"))
      .def(
          "memory_start",
          [](Collector& c, int64_t max_live, int64_t timeline_points) {
            if (max_live < 1 || timeline_points < 2)
              throw py::value_error("memory_start needs max_live >= 1 and timeline_points >= 2");
            c.memory().start(static_cast<size_t>(max_live), static_cast<size_t>(timeline_points));
          },
          py::arg("max_live") = 1 << 20, py::arg("timeline_points") = 512)
      .def("memory_stop", [](Collector& c) { c.memory().stop(); })
      .def("memory_on", [](Collector& c) { return c.memory().on(); })
      .def(
          "memory_report",
          [](Collector& c, uint64_t ptr, int64_t size, int32_t device_type, int32_t device_index,
             int64_t node, uint64_t total, uint64_t reserved) {
            c.memory().report_on(device_type, device_index, static_cast<uintptr_t>(ptr), size, node,
                                 static_cast<uint64_t>(dc::now_ns()), reserved, total);
          },
          py::arg("ptr"), py::arg("size"), py::arg("device_type"), py::arg("device_index"),
          py::arg("node"), py::arg("total") = 0, py::arg("reserved") = 0)
      .def(
          "memory_hold",
          [](Collector& c, uint64_t ptr, int64_t size, int32_t device_type, int32_t device_index,
             int64_t node, int category, bool resident) {
            const int slot = c.memory().device_slot(device_type, device_index);
            return c.memory().hold(static_cast<uintptr_t>(ptr), size, slot, node, category,
                                   resident);
          },
          py::arg("ptr"), py::arg("size"), py::arg("device_type"), py::arg("device_index"),
          py::arg("node"), py::arg("category"), py::arg("resident") = false)
      .def(
          "memory_release",
          [](Collector& c, uint64_t ptr, uint64_t token) {
            c.memory().release(static_cast<uintptr_t>(ptr), token);
          },
          py::arg("ptr"), py::arg("token"))
      .def(
          "memory_mark",
          [](Collector& c, uint64_t ptr, int category, bool only_temporary) {
            return c.memory().mark(static_cast<uintptr_t>(ptr), category, only_temporary);
          },
          py::arg("ptr"), py::arg("category"), py::arg("only_temporary") = false)
      .def("memory_snapshot", &memory_snapshot)
      .def("capturing", &Collector::capturing)
      .def("capture_api", [](Collector& c) {
        // Borrowed by the framework extension between capture_start and
        // capture_stop, while the caller keeps the collector alive.
        void* api = const_cast<dc_capture_api*>(c.capture_api());
        return py::reinterpret_steal<py::object>(PyCapsule_New(api, DC_CAPTURE_CAPSULE, nullptr));
      });
  dc::install_fastcall(cls);
}
