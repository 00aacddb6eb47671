// The bridge between candidates built against the light headers and PyTorch itself.
//
// Built once per toolchain with PyTorch's real headers (gpu_workers/build/light.py), imported as a
// Python extension. A candidate's library exports kernelcourt_lite_init (kernelcourt_lite.h); bind()
// opens it, hands it the table of functions below (tensor queries, any ATen operator through the
// dispatcher, the CUDA stream PyTorch uses) and returns its functions as Python callables that
// convert arguments and results as pybind11 would for a load_inline extension.
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef KA_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernelcourt_abi.h"

namespace {

at::Tensor& tensor(void* handle) { return *static_cast<at::Tensor*>(handle); }
void* new_handle(at::Tensor value) { return new at::Tensor(std::move(value)); }

void release(void* handle) { delete static_cast<at::Tensor*>(handle); }
void* share(void* handle) { return new_handle(tensor(handle)); }
int64_t dim(void* h) { return tensor(h).dim(); }
const int64_t* sizes(void* h) { return tensor(h).sizes().data(); }
const int64_t* strides(void* h) { return tensor(h).strides().data(); }
int64_t numel(void* h) { return tensor(h).numel(); }
int64_t storage_offset(void* h) { return tensor(h).storage_offset(); }
int32_t scalar_type(void* h) { return static_cast<int32_t>(tensor(h).scalar_type()); }
int32_t device_type(void* h) { return static_cast<int32_t>(tensor(h).device().type()); }
int32_t device_index(void* h) { return tensor(h).device().index(); }
void* data_ptr(void* h) { return tensor(h).data_ptr(); }
int32_t is_contiguous(void* h, int32_t format) {
  return tensor(h).is_contiguous(static_cast<at::MemoryFormat>(format)) ? 1 : 0;
}
int32_t requires_grad(void* h) { return tensor(h).requires_grad() ? 1 : 0; }
int64_t element_size(void* h) { return static_cast<int64_t>(tensor(h).element_size()); }

void copy_message(const char* text, char* err, int32_t errlen) {
  if (err == nullptr || errlen <= 0) return;
  std::strncpy(err, text, static_cast<size_t>(errlen) - 1);
  err[errlen - 1] = '\0';
}

c10::IValue to_ivalue(const ka_value& v, const c10::Argument& arg) {
  switch (v.tag) {
    case KA_NONE:
      return c10::IValue();
    case KA_TENSOR:
      return c10::IValue(tensor(v.p));
    case KA_INT: {
      const auto kind = arg.type()->kind();
      if (kind == c10::TypeKind::FloatType) return c10::IValue(static_cast<double>(v.i));
      return c10::IValue(v.i);
    }
    case KA_DOUBLE:
      return c10::IValue(v.d);
    case KA_BOOL:
      return c10::IValue(v.i != 0);
    case KA_INTS: {
      const auto* data = static_cast<const int64_t*>(v.p);
      return c10::IValue(std::vector<int64_t>(data, data + v.n));
    }
    case KA_DOUBLES: {
      const auto* data = static_cast<const double*>(v.p);
      return c10::IValue(std::vector<double>(data, data + v.n));
    }
    case KA_TENSORS: {
      const auto* items = static_cast<const ka_value*>(v.p);
      std::vector<at::Tensor> list;
      list.reserve(static_cast<size_t>(v.n));
      for (int64_t i = 0; i < v.n; ++i) list.push_back(items[i].tag == KA_TENSOR ? tensor(items[i].p) : at::Tensor());
      return c10::IValue(list);
    }
    case KA_DTYPE:
      return c10::IValue(static_cast<c10::ScalarType>(v.i));
    case KA_DEVICE:
      return c10::IValue(c10::Device(static_cast<c10::DeviceType>(v.i), static_cast<c10::DeviceIndex>(v.n)));
    case KA_LAYOUT:
      return c10::IValue(static_cast<c10::Layout>(v.i));
    case KA_MEMORY_FORMAT:
      return c10::IValue(static_cast<c10::MemoryFormat>(v.i));
    case KA_STRING:
      return c10::IValue(std::string(static_cast<const char*>(v.p), static_cast<size_t>(v.n)));
    default:
      TORCH_CHECK(false, "kernelcourt bridge: unknown argument kind ", v.tag, " for ", arg.name());
  }
}

void from_ivalue(const c10::IValue& value, ka_value* out) {
  std::memset(out, 0, sizeof(*out));
  if (value.isNone()) {
    out->tag = KA_NONE;
  } else if (value.isTensor()) {
    out->tag = KA_TENSOR;
    out->p = new_handle(value.toTensor());
  } else if (value.isBool()) {
    out->tag = KA_BOOL;
    out->i = value.toBool() ? 1 : 0;
  } else if (value.isInt()) {
    out->tag = KA_INT;
    out->i = value.toInt();
  } else if (value.isDouble()) {
    out->tag = KA_DOUBLE;
    out->d = value.toDouble();
  } else if (value.isTensorList()) {
    auto list = value.toTensorVector();
    auto* items = static_cast<ka_value*>(std::calloc(list.size() + 1, sizeof(ka_value)));
    for (size_t i = 0; i < list.size(); ++i) from_ivalue(c10::IValue(list[i]), &items[i]);
    out->tag = KA_TENSORS;
    out->p = items;
    out->n = static_cast<int64_t>(list.size());
  } else if (value.isTuple()) {
    const auto& elements = value.toTupleRef().elements();
    auto* items = static_cast<ka_value*>(std::calloc(elements.size() + 1, sizeof(ka_value)));
    for (size_t i = 0; i < elements.size(); ++i) from_ivalue(elements[i], &items[i]);
    out->tag = KA_TUPLE;
    out->p = items;
    out->n = static_cast<int64_t>(elements.size());
  } else {
    TORCH_CHECK(false, "kernelcourt bridge: an operator returned ", value.tagKind(), ", which the light headers cannot hold");
  }
}

const c10::OperatorHandle& find_operator(const char* name, const char* overload) {
  static std::mutex lock;
  static std::unordered_map<std::string, std::unique_ptr<c10::OperatorHandle>> cache;
  std::string key = std::string(name) + "." + overload;
  std::lock_guard<std::mutex> guard(lock);
  auto found = cache.find(key);
  if (found != cache.end()) return *found->second;
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  auto stored = std::make_unique<c10::OperatorHandle>(handle);
  auto& ref = *stored;
  cache.emplace(key, std::move(stored));
  return ref;
}

int32_t call_op(const char* name, const char* overload, const ka_value* args, int32_t nargs, ka_value* out,
                char* err, int32_t errlen) {
  try {
    const auto& op = find_operator(name, overload);
    const auto& params = op.schema().arguments();
    std::vector<c10::IValue> slots(params.size());
    std::vector<bool> given(params.size(), false);
    size_t position = 0;
    for (int32_t i = 0; i < nargs; ++i) {
      size_t index = params.size();
      if (args[i].name != nullptr) {
        for (size_t j = 0; j < params.size(); ++j)
          if (params[j].name() == args[i].name) index = j;
        TORCH_CHECK(index < params.size(), name, ".", overload, " has no argument named ", args[i].name);
      } else {
        index = position++;
        TORCH_CHECK(index < params.size() && !params[index].kwarg_only(), name, ".", overload,
                    " takes fewer positional arguments");
      }
      slots[index] = to_ivalue(args[i], params[index]);
      given[index] = true;
    }
    for (size_t j = 0; j < params.size(); ++j) {
      if (given[j]) continue;
      TORCH_CHECK(params[j].default_value().has_value(), name, ".", overload, " needs argument ", params[j].name());
      slots[j] = *params[j].default_value();
    }
    torch::jit::Stack stack(std::make_move_iterator(slots.begin()), std::make_move_iterator(slots.end()));
    op.callBoxed(&stack);
    if (stack.empty()) {
      std::memset(out, 0, sizeof(*out));
    } else if (stack.size() == 1) {
      from_ivalue(stack[0], out);
    } else {
      auto* items = static_cast<ka_value*>(std::calloc(stack.size(), sizeof(ka_value)));
      for (size_t i = 0; i < stack.size(); ++i) from_ivalue(stack[i], &items[i]);
      std::memset(out, 0, sizeof(*out));
      out->tag = KA_TUPLE;
      out->p = items;
      out->n = static_cast<int64_t>(stack.size());
    }
    return KA_OK;
  } catch (const c10::IndexError& e) {
    copy_message(e.what_without_backtrace(), err, errlen);
    return KA_INDEX_ERROR;
  } catch (const c10::ValueError& e) {
    copy_message(e.what_without_backtrace(), err, errlen);
    return KA_VALUE_ERROR;
  } catch (const c10::TypeError& e) {
    copy_message(e.what_without_backtrace(), err, errlen);
    return KA_TYPE_ERROR;
  } catch (const c10::Error& e) {
    copy_message(e.what_without_backtrace(), err, errlen);
    return KA_RUNTIME_ERROR;
  } catch (const std::exception& e) {
    copy_message(e.what(), err, errlen);
    return KA_RUNTIME_ERROR;
  }
}

#ifdef KA_WITH_CUDA
c10::DeviceIndex pick(int32_t index) {
  return index < 0 ? c10::cuda::current_device() : static_cast<c10::DeviceIndex>(index);
}
void* current_stream(int32_t index) { return c10::cuda::getCurrentCUDAStream(pick(index)).stream(); }
void* default_stream(int32_t index) { return c10::cuda::getDefaultCUDAStream(pick(index)).stream(); }
int32_t current_device() { return c10::cuda::current_device(); }
void set_device(int32_t index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }
const void* device_properties(int32_t index) {  // cached per device, as at::cuda's are
  static std::mutex lock;
  static std::unordered_map<int32_t, std::unique_ptr<cudaDeviceProp>> cache;
  const int32_t device = pick(index);
  std::lock_guard<std::mutex> guard(lock);
  auto& entry = cache[device];
  if (!entry) {
    entry = std::make_unique<cudaDeviceProp>();
    C10_CUDA_CHECK(cudaGetDeviceProperties(entry.get(), device));
  }
  return entry.get();
}
#else
void* current_stream(int32_t) { return nullptr; }
void* default_stream(int32_t) { return nullptr; }
int32_t current_device() { return -1; }
void set_device(int32_t) {}
const void* device_properties(int32_t) { return nullptr; }
#endif

const char* scalar_type_name(int32_t type) { return c10::toString(static_cast<c10::ScalarType>(type)); }
void warn(const char* message) { TORCH_WARN(message); }

void parallel_for(int64_t begin, int64_t end, int64_t grain, void (*body)(void*, int64_t, int64_t), void* ctx) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { body(ctx, b, e); });
}
int32_t get_num_threads() { return at::get_num_threads(); }
int32_t get_thread_num() { return at::get_thread_num(); }
int32_t in_parallel_region() { return at::in_parallel_region() ? 1 : 0; }

const ka_api API = {
    KA_ABI_VERSION, release,   share,          dim,          sizes,          strides,          numel,
    storage_offset, scalar_type, device_type,  device_index, data_ptr,       is_contiguous,    requires_grad,
    element_size,   call_op,   current_stream, default_stream, current_device, set_device, device_properties,
    scalar_type_name, warn,      parallel_for,   get_num_threads, get_thread_num, in_parallel_region,
};

// ---- Python side -----------------------------------------------------------------------------------
struct Arguments {  // keeps what the ka_values point to alive for one call
  std::vector<ka_value> values;
  std::vector<std::unique_ptr<at::Tensor>> tensors;
  std::vector<std::vector<int64_t>> ints;
  std::vector<std::vector<double>> doubles;
  std::vector<std::vector<ka_value>> lists;
  std::vector<std::string> strings;
};

ka_value convert(py::handle obj, Arguments& keep) {
  ka_value v;
  std::memset(&v, 0, sizeof(v));
  if (obj.is_none()) {
    v.tag = KA_NONE;
  } else if (THPVariable_Check(obj.ptr())) {
    keep.tensors.push_back(std::make_unique<at::Tensor>(THPVariable_Unpack(obj.ptr())));
    v.tag = KA_TENSOR;
    v.p = keep.tensors.back().get();
  } else if (PyBool_Check(obj.ptr())) {
    v.tag = KA_BOOL;
    v.i = obj.ptr() == Py_True ? 1 : 0;
  } else if (PyLong_Check(obj.ptr())) {
    v.tag = KA_INT;
    v.i = obj.cast<int64_t>();
  } else if (PyFloat_Check(obj.ptr())) {
    v.tag = KA_DOUBLE;
    v.d = obj.cast<double>();
  } else if (THPDtype_Check(obj.ptr())) {
    v.tag = KA_DTYPE;
    v.i = static_cast<int64_t>(reinterpret_cast<THPDtype*>(obj.ptr())->scalar_type);
  } else if (THPDevice_Check(obj.ptr())) {
    const auto& device = reinterpret_cast<THPDevice*>(obj.ptr())->device;
    v.tag = KA_DEVICE;
    v.i = static_cast<int64_t>(device.type());
    v.n = device.index();
  } else if (PyUnicode_Check(obj.ptr())) {
    keep.strings.push_back(obj.cast<std::string>());
    v.tag = KA_STRING;
    v.p = const_cast<char*>(keep.strings.back().data());
    v.n = static_cast<int64_t>(keep.strings.back().size());
  } else if (PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr())) {
    auto seq = py::reinterpret_borrow<py::sequence>(obj);
    bool all_ints = true, all_numbers = true, all_tensors = true;
    for (auto item : seq) {
      const bool is_int = PyLong_Check(item.ptr()) && !PyBool_Check(item.ptr());
      all_ints &= is_int;
      all_numbers &= is_int || PyFloat_Check(item.ptr());
      all_tensors &= THPVariable_Check(item.ptr());
    }
    if (all_ints) {
      std::vector<int64_t> values;
      for (auto item : seq) values.push_back(item.cast<int64_t>());
      keep.ints.push_back(std::move(values));
      v.tag = KA_INTS;
      v.p = keep.ints.back().data();
      v.n = static_cast<int64_t>(keep.ints.back().size());
    } else if (all_tensors) {
      std::vector<ka_value> items;
      for (auto item : seq) items.push_back(convert(item, keep));
      keep.lists.push_back(std::move(items));
      v.tag = KA_TENSORS;
      v.p = keep.lists.back().data();
      v.n = static_cast<int64_t>(keep.lists.back().size());
    } else if (all_numbers) {
      std::vector<double> values;
      for (auto item : seq) values.push_back(item.cast<double>());
      keep.doubles.push_back(std::move(values));
      v.tag = KA_DOUBLES;
      v.p = keep.doubles.back().data();
      v.n = static_cast<int64_t>(keep.doubles.back().size());
    } else {
      throw py::type_error("a list argument must hold only ints, only numbers or only tensors");
    }
  } else {
    throw py::type_error(std::string("unsupported argument type: ") + std::string(Py_TYPE(obj.ptr())->tp_name));
  }
  return v;
}

py::object to_python(ka_value& v) {  // takes ownership of what v holds
  switch (v.tag) {
    case KA_NONE:
      return py::none();
    case KA_TENSOR: {
      auto* handle = static_cast<at::Tensor*>(v.p);
      py::object result = py::reinterpret_steal<py::object>(THPVariable_Wrap(*handle));
      delete handle;
      return result;
    }
    case KA_INT:
      return py::int_(v.i);
    case KA_BOOL:
      return py::bool_(v.i != 0);
    case KA_DOUBLE:
      return py::float_(v.d);
    case KA_TENSORS:
    case KA_TUPLE: {
      auto* items = static_cast<ka_value*>(v.p);
      py::list list;
      for (int64_t i = 0; i < v.n; ++i) list.append(to_python(items[i]));
      std::free(items);
      if (v.tag == KA_TUPLE) return py::tuple(list);
      return std::move(list);
    }
    default:
      throw std::runtime_error("kernelcourt bridge: a function returned a value of unknown kind");
  }
}

[[noreturn]] void raise(int32_t kind, const char* message) {
  switch (kind) {
    case KA_VALUE_ERROR:
      throw py::value_error(message);
    case KA_TYPE_ERROR:
      throw py::type_error(message);
    case KA_INDEX_ERROR:
      throw py::index_error(message);
    default:
      throw std::runtime_error(message);
  }
}

py::object invoke(const ka_function* fn, py::args args, py::kwargs kwargs) {
  Arguments keep;
  const int64_t declared = fn->nparams;
  std::vector<bool> given;
  for (auto item : args) keep.values.push_back(convert(item, keep));
  if (declared >= 0) {
    if (static_cast<int64_t>(keep.values.size()) > declared)
      throw py::type_error(std::string(fn->name) + "() takes " + std::to_string(declared) + " arguments (" +
                           std::to_string(keep.values.size()) + " given)");
    given.assign(static_cast<size_t>(declared), false);
    for (size_t i = 0; i < keep.values.size(); ++i) given[i] = true;
    keep.values.resize(static_cast<size_t>(declared));
    for (auto item : kwargs) {
      const std::string key = item.first.cast<std::string>();
      int64_t index = -1;
      for (int64_t j = 0; fn->arg_names != nullptr && j < declared; ++j)
        if (fn->arg_names[j] != nullptr && key == fn->arg_names[j]) index = j;
      if (index < 0) throw py::type_error(std::string(fn->name) + "() got an unexpected keyword argument '" + key + "'");
      if (given[static_cast<size_t>(index)])
        throw py::type_error(std::string(fn->name) + "() got multiple values for argument '" + key + "'");
      keep.values[static_cast<size_t>(index)] = convert(item.second, keep);
      given[static_cast<size_t>(index)] = true;
    }
    for (int64_t j = 0; j < declared; ++j) {
      if (given[static_cast<size_t>(j)]) continue;
      if (fn->arg_defaults == nullptr || fn->arg_defaults[j].tag < 0)
        throw py::type_error(std::string(fn->name) + "() missing argument " +
                             (fn->arg_names != nullptr && fn->arg_names[j] != nullptr ? std::string("'") + fn->arg_names[j] + "'"
                                                                                      : std::to_string(j)));
      keep.values[static_cast<size_t>(j)] = fn->arg_defaults[j];
    }
  } else if (kwargs.size() > 0) {
    throw py::type_error(std::string(fn->name) + "() takes no keyword arguments");
  }
  ka_value out;
  std::memset(&out, 0, sizeof(out));
  char message[8192] = {0};
  const int32_t status = fn->call(fn->self, keep.values.data(), static_cast<int32_t>(keep.values.size()), &out,
                                  message, sizeof(message));
  if (status != KA_OK) raise(status, message);
  return to_python(out);
}

py::list bind(const std::string& path) {
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) throw std::runtime_error(std::string("cannot load ") + path + ": " + dlerror());
  auto init = reinterpret_cast<ka_init_fn>(dlsym(library, KA_INIT_SYMBOL));
  if (init == nullptr) throw std::runtime_error(path + " has no " KA_INIT_SYMBOL);
  const ka_function* functions = nullptr;
  int32_t count = 0;
  char message[8192] = {0};
  const int32_t status = init(&API, &functions, &count, message, sizeof(message));
  if (status != KA_OK) raise(status, message);
  py::list result;
  for (int32_t i = 0; i < count; ++i) {
    const ka_function* fn = &functions[i];
    py::cpp_function callable([fn](py::args args, py::kwargs kwargs) { return invoke(fn, args, kwargs); },
                              py::name(fn->name), py::doc(fn->doc != nullptr ? fn->doc : ""));
    result.append(py::make_tuple(fn->name, callable));
  }
  return result;  // the library stays loaded for the process's life, as an imported extension does
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bind", &bind, "Load a library built against the light headers; returns [(name, function)].");
  m.attr("abi_version") = KA_ABI_VERSION;
}
