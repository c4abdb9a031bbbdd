// Python module weft_torch._C: the WeftBackend class (a torch.distributed Backend) and its
// constructor from torch's store, plus a few weft queries. Registration with
// torch.distributed happens in weft_torch/__init__.py.
#include <pybind11/chrono.h>
#include <torch/python.h>

#include <weft/weft_device.h>

#include "overhead_probe.h"
#include "tensor_args.h"
#include "weft_backend.h"

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "weft collectives as a torch.distributed backend (CPU and CUDA tensors)";
  py::class_<weft_torch::WeftBackend, c10d::Backend, c10::intrusive_ptr<weft_torch::WeftBackend>>(
      m, "WeftBackend")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def("perform_nocolor_split",
           [](weft_torch::WeftBackend& self, py::object /*device*/) { self.splitNoColor(); },
           py::arg("device") = py::none(), py::call_guard<py::gil_scoped_release>())
      .def("allreduce_compressed", &weft_torch::WeftBackend::allreduceCompressed,
           py::arg("tensor"), py::arg("spec"), py::arg("residual") = py::none(),
           py::arg("average") = true, py::call_guard<py::gil_scoped_release>(),
           "weftAllReduceCompressed on tensor in place, queued like an async collective; "
           "returns the Work (its Future holds [tensor]).")
      .def("comm_split_count", &weft_torch::WeftBackend::splitCount)
      .def("last_algorithm", &weft_torch::WeftBackend::lastAlgorithm,
           "The algorithm weft ran for the last collective of this group (e.g. \"ring\").");
  py::class_<weft_torch::CompressionSpec>(m, "CompressionSpec")
      .def(py::init<const std::string&>(), py::arg("text"))
      .def_property_readonly("text", &weft_torch::CompressionSpec::text)
      .def_property_readonly("codec", &weft_torch::CompressionSpec::codecName)
      .def_property_readonly("block", [](const weft_torch::CompressionSpec& s) { return s.spec().block; })
      .def_property_readonly("ratio", [](const weft_torch::CompressionSpec& s) { return s.spec().ratio; })
      .def_property_readonly("seed", [](const weft_torch::CompressionSpec& s) { return s.spec().seed; })
      .def_property_readonly("flags", [](const weft_torch::CompressionSpec& s) { return s.spec().flags; })
      .def("encoded_bytes", &weft_torch::CompressionSpec::encodedBytes, py::arg("count"))
      .def("__repr__", [](const weft_torch::CompressionSpec& s) {
        return "CompressionSpec(\"" + s.text() + "\")";
      });
  m.def("_measure_overhead", &weft_torch::MeasureOverhead, py::arg("backend"), py::arg("numel"),
        py::arg("iters"), py::call_guard<py::gil_scoped_release>(),
        "(us per call through WeftBackend::allreduce + wait, us per bare weftAllReduce)");
  // The device checks every collective runs on its tensors, for tensors given by device only:
  // lets CPU-only test machines (where no CUDA tensor can exist) check the messages about CUDA
  // tensors with the code the collectives use. runtime stands for weftDeviceRuntimeName().
  m.def(
      "_check_devices",
      [](const std::string& collective, const std::vector<std::pair<std::string, c10::Device>>& args,
         const std::string& runtime) {
        weft_torch::CallDevice dev(collective.c_str());
        for (const auto& [argument, device] : args) dev.AddDevice(device, argument, runtime);
      },
      py::arg("collective"), py::arg("arguments"), py::arg("runtime"),
      "Raises the ValueError a collective raises for tensors on these devices "
      "([(argument, torch.device)]) under device runtime `runtime`.");
  m.def("device_runtime", [] { return std::string(weftDeviceRuntimeName()); },
        "weft's active device runtime: \"cuda\", \"emulated\" or \"none\" (WEFT_DEVICE).");
  m.def("version", [] {
    int version = 0;
    weftGetVersion(&version);
    return version;
  });
}
