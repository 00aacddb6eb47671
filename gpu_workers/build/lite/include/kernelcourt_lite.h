// Light headers for a candidate's host code: the everyday part of PyTorch's C++ API (tensors,
// options, factories and common operators, TORCH_CHECK, AT_DISPATCH, CUDA streams and guards, the
// pybind11 module definition), so that a load_inline build compiles the candidate's own code in well
// under a second instead of parsing torch/extension.h.
//
// Every operation goes to PyTorch itself through the bridge (kernelcourt_abi.h, bridge.cpp): tensor
// queries read the real tensor, operators are called through PyTorch's dispatcher by schema name, the
// stream is PyTorch's current stream. Code that needs more than this falls back to the full headers
// (gpu_workers/build/light.py), so nothing a candidate may write is narrowed.
#ifndef KERNELCOURT_LITE_H
#define KERNELCOURT_LITE_H

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef KA_LITE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

#include "../abi/kernelcourt_abi.h"

#define KERNELCOURT_LITE 1

// ---- errors ------------------------------------------------------------------------------------------
namespace c10 { inline namespace kernelcourt_lite {
class Error : public std::exception {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const char* what_without_backtrace() const noexcept { return message_.c_str(); }
  const std::string& msg() const { return message_; }

 private:
  std::string message_;
};
class ValueError : public Error { using Error::Error; };
class TypeError : public Error { using Error::Error; };
class IndexError : public Error { using Error::Error; };
class NotImplementedError : public Error { using Error::Error; };
} }  // namespace c10

namespace ka {
template <class... A>
std::string str(const A&... parts) {
  std::ostringstream out;
  (void)std::initializer_list<int>{((out << parts), 0)...};
  return out.str();
}
inline std::string check_message(const char* condition) {
  return str("Expected ", condition, " to be true, but got false.  (Could this error message be improved?  If so, ",
             "please report an enhancement request to PyTorch.)");
}
template <class... A>
std::string check_message(const char*, const A&... parts) {
  return str(parts...);
}
}  // namespace ka

#define KA_CHECK_AS(KIND, cond, ...) \
  do {                                \
    if (!(cond)) throw KIND(::ka::check_message(#cond, ##__VA_ARGS__)); \
  } while (0)
#define TORCH_CHECK(cond, ...) KA_CHECK_AS(::c10::Error, cond, ##__VA_ARGS__)
#define TORCH_CHECK_VALUE(cond, ...) KA_CHECK_AS(::c10::ValueError, cond, ##__VA_ARGS__)
#define TORCH_CHECK_TYPE(cond, ...) KA_CHECK_AS(::c10::TypeError, cond, ##__VA_ARGS__)
#define TORCH_CHECK_INDEX(cond, ...) KA_CHECK_AS(::c10::IndexError, cond, ##__VA_ARGS__)
#define TORCH_CHECK_NOT_IMPLEMENTED(cond, ...) KA_CHECK_AS(::c10::NotImplementedError, cond, ##__VA_ARGS__)
#define TORCH_CHECK_EQ(a, b) TORCH_CHECK((a) == (b))
#define TORCH_CHECK_NE(a, b) TORCH_CHECK((a) != (b))
#define TORCH_CHECK_LE(a, b) TORCH_CHECK((a) <= (b))
#define TORCH_CHECK_LT(a, b) TORCH_CHECK((a) < (b))
#define TORCH_CHECK_GE(a, b) TORCH_CHECK((a) >= (b))
#define TORCH_CHECK_GT(a, b) TORCH_CHECK((a) > (b))
#define TORCH_INTERNAL_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define AT_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define AT_ASSERTM(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define AT_ERROR(...) throw ::c10::Error(::ka::str(__VA_ARGS__))
#define TORCH_WARN(...) ::ka::api().warn(::ka::str(__VA_ARGS__).c_str())
#define TORCH_WARN_ONCE(...) TORCH_WARN(__VA_ARGS__)
#define C10_LIKELY(x) __builtin_expect(static_cast<bool>(x), 1)
#define C10_UNLIKELY(x) __builtin_expect(static_cast<bool>(x), 0)

// One table per library: shared by its C++ and CUDA units (an inline variable), never seen by another
// library (hidden: not exported, so not merged across libraries at load time).
#define KA_HIDDEN __attribute__((visibility("hidden")))
namespace ka {
inline KA_HIDDEN const ka_api* api_table = nullptr;
inline const ka_api*& api_slot() { return api_table; }
inline const ka_api& api() { return *api_table; }

[[noreturn]] inline void raise(int32_t kind, const char* message) {
  switch (kind) {
    case KA_VALUE_ERROR: throw c10::ValueError(message);
    case KA_TYPE_ERROR: throw c10::TypeError(message);
    case KA_INDEX_ERROR: throw c10::IndexError(message);
    default: throw c10::Error(message);
  }
}
}  // namespace ka

// ---- scalar types, devices, layouts ------------------------------------------------------------------
namespace c10 { inline namespace kernelcourt_lite {
enum class ScalarType : int8_t {
  Byte = 0, Char = 1, Short = 2, Int = 3, Long = 4, Half = 5, Float = 6, Double = 7, ComplexHalf = 8,
  ComplexFloat = 9, ComplexDouble = 10, Bool = 11, QInt8 = 12, QUInt8 = 13, QInt32 = 14, BFloat16 = 15,
  Float8_e5m2 = 23, Float8_e4m3fn = 24, UInt16 = 27, UInt32 = 28, UInt64 = 29, Undefined = 127
};
constexpr ScalarType kByte = ScalarType::Byte, kChar = ScalarType::Char, kShort = ScalarType::Short,
                     kInt = ScalarType::Int, kLong = ScalarType::Long, kHalf = ScalarType::Half,
                     kFloat = ScalarType::Float, kDouble = ScalarType::Double, kBool = ScalarType::Bool,
                     kBFloat16 = ScalarType::BFloat16, kComplexFloat = ScalarType::ComplexFloat,
                     kComplexDouble = ScalarType::ComplexDouble, kComplexHalf = ScalarType::ComplexHalf,
                     kUInt8 = ScalarType::Byte, kInt8 = ScalarType::Char, kInt16 = ScalarType::Short,
                     kInt32 = ScalarType::Int, kInt64 = ScalarType::Long, kFloat16 = ScalarType::Half,
                     kFloat32 = ScalarType::Float, kFloat64 = ScalarType::Double,
                     kFloat8_e5m2 = ScalarType::Float8_e5m2, kFloat8_e4m3fn = ScalarType::Float8_e4m3fn,
                     kUInt16 = ScalarType::UInt16, kUInt32 = ScalarType::UInt32, kUInt64 = ScalarType::UInt64;

inline const char* toString(ScalarType type) {
  const char* name = ::ka::api_slot() ? ::ka::api().scalar_type_name(static_cast<int32_t>(type)) : nullptr;
  return name ? name : "UNKNOWN_SCALAR";
}
inline std::ostream& operator<<(std::ostream& out, ScalarType type) { return out << toString(type); }
inline size_t elementSize(ScalarType type) {
  switch (type) {
    case ScalarType::Byte: case ScalarType::Char: case ScalarType::Bool: case ScalarType::QInt8:
    case ScalarType::QUInt8: case ScalarType::Float8_e5m2: case ScalarType::Float8_e4m3fn: return 1;
    case ScalarType::Short: case ScalarType::Half: case ScalarType::BFloat16: case ScalarType::UInt16: return 2;
    case ScalarType::Int: case ScalarType::Float: case ScalarType::QInt32: case ScalarType::UInt32:
    case ScalarType::ComplexHalf: return 4;
    case ScalarType::ComplexFloat: return 8;
    case ScalarType::ComplexDouble: return 16;
    default: return 8;
  }
}
inline bool isFloatingType(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::Half || t == ScalarType::BFloat16 ||
         t == ScalarType::Float8_e5m2 || t == ScalarType::Float8_e4m3fn;
}
inline bool isIntegralType(ScalarType t, bool include_bool) {
  return t == ScalarType::Byte || t == ScalarType::Char || t == ScalarType::Short || t == ScalarType::Int ||
         t == ScalarType::Long || t == ScalarType::UInt16 || t == ScalarType::UInt32 || t == ScalarType::UInt64 ||
         (include_bool && t == ScalarType::Bool);
}
inline bool isComplexType(ScalarType t) {
  return t == ScalarType::ComplexHalf || t == ScalarType::ComplexFloat || t == ScalarType::ComplexDouble;
}

enum class DeviceType : int8_t { CPU = 0, CUDA = 1, Meta = 9 };
constexpr DeviceType kCPU = DeviceType::CPU, kCUDA = DeviceType::CUDA, kMeta = DeviceType::Meta;
using DeviceIndex = int8_t;

class Device {
 public:
  Device(DeviceType type, DeviceIndex index = -1) : type_(type), index_(index) {}
  explicit Device(const std::string& spec) {
    const auto colon = spec.find(':');
    const std::string kind = spec.substr(0, colon);
    if (kind == "cuda") type_ = DeviceType::CUDA;
    else if (kind == "cpu") type_ = DeviceType::CPU;
    else if (kind == "meta") type_ = DeviceType::Meta;
    else throw Error("Expected one of cpu, cuda, meta device type at start of device string: " + spec);
    index_ = colon == std::string::npos ? -1 : static_cast<DeviceIndex>(std::stoi(spec.substr(colon + 1)));
  }
  DeviceType type() const { return type_; }
  DeviceIndex index() const { return index_; }
  bool has_index() const { return index_ >= 0; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_meta() const { return type_ == DeviceType::Meta; }
  void set_index(DeviceIndex index) { index_ = index; }
  bool operator==(const Device& other) const { return type_ == other.type_ && index_ == other.index_; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  std::string str() const {
    const char* kind = type_ == DeviceType::CUDA ? "cuda" : (type_ == DeviceType::Meta ? "meta" : "cpu");
    return index_ >= 0 ? ::ka::str(kind, ":", static_cast<int>(index_)) : std::string(kind);
  }

 private:
  DeviceType type_ = DeviceType::CPU;
  DeviceIndex index_ = -1;
};
inline std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

enum class Layout : int8_t { Strided = 0 };
constexpr Layout kStrided = Layout::Strided;
enum class MemoryFormat : int8_t { Contiguous = 0, Preserve = 1, ChannelsLast = 2, ChannelsLast3d = 3 };

using std::nullopt;
using std::optional;

template <class T>
class ArrayRef {
 public:
  using value_type = T;
  using iterator = const T*;
  using const_iterator = const T*;
  ArrayRef() = default;
  ArrayRef(const T& one) : data_(&one), size_(1) {}
  ArrayRef(const T* data, size_t size) : data_(data), size_(size) {}
  ArrayRef(const T* begin, const T* end) : data_(begin), size_(static_cast<size_t>(end - begin)) {}
  template <class A>
  ArrayRef(const std::vector<T, A>& values) : data_(values.data()), size_(values.size()) {}
  template <size_t N>
  ArrayRef(const std::array<T, N>& values) : data_(values.data()), size_(N) {}
  template <size_t N>
  ArrayRef(const T (&values)[N]) : data_(values), size_(N) {}
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  // as c10's: valid for the full expression that built the list (a call's argument)
  ArrayRef(const std::initializer_list<T>& values)
      : data_(values.begin() == values.end() ? nullptr : values.begin()), size_(values.size()) {}
#pragma GCC diagnostic pop
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T& at(size_t i) const {
    TORCH_CHECK_INDEX(i < size_, "ArrayRef: invalid index Index = ", i, "; Length = ", size_);
    return data_[i];
  }
  const T& front() const { return data_[0]; }
  const T& back() const { return data_[size_ - 1]; }
  std::vector<T> vec() const { return std::vector<T>(data_, data_ + size_); }
  ArrayRef slice(size_t n, size_t m) const { return ArrayRef(data_ + n, m); }
  ArrayRef slice(size_t n) const { return ArrayRef(data_ + n, size_ - n); }
  bool equals(ArrayRef other) const { return size_ == other.size_ && std::equal(begin(), end(), other.begin()); }
  operator std::vector<T>() const { return vec(); }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};
template <class T>
bool operator==(ArrayRef<T> a, ArrayRef<T> b) { return a.equals(b); }
template <class T>
bool operator!=(ArrayRef<T> a, ArrayRef<T> b) { return !a.equals(b); }
template <class T>
std::ostream& operator<<(std::ostream& out, ArrayRef<T> values) {
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  return out << "]";
}
using IntArrayRef = ArrayRef<int64_t>;

// half and bfloat16 as storage types (round to nearest even, as c10 does)
struct alignas(2) Half {
  uint16_t x = 0;
  struct from_bits_t {};
  Half() = default;
  constexpr Half(uint16_t bits, from_bits_t) : x(bits) {}
  Half(float value) : x(from_float(value)) {}
  operator float() const { return to_float(x); }
  static uint16_t from_float(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint32_t sign = (bits >> 16) & 0x8000u;
    bits &= 0x7fffffffu;
    if (bits >= 0x7f800000u) return static_cast<uint16_t>(sign | (bits > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (bits < 0x38800000u) {  // subnormal or zero
      float magnitude;
      std::memcpy(&magnitude, &bits, 4);
      return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f)));
    }
    const uint32_t rounded = bits + 0xfffu + ((bits >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    float magnitude;
    if (exponent == 0) {
      magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    } else if (exponent == 31) {
      magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    } else {
      const uint32_t bits = ((exponent + 112u) << 23) | (mantissa << 13);
      std::memcpy(&magnitude, &bits, 4);
    }
    uint32_t out;
    std::memcpy(&out, &magnitude, 4);
    out |= sign;
    float result;
    std::memcpy(&result, &out, 4);
    return result;
  }
};
struct alignas(2) BFloat16 {
  uint16_t x = 0;
  struct from_bits_t {};
  BFloat16() = default;
  constexpr BFloat16(uint16_t bits, from_bits_t) : x(bits) {}
  BFloat16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    x = std::isnan(value) ? 0x7fc0u : static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
  operator float() const {
    const uint32_t bits = static_cast<uint32_t>(x) << 16;
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  }
};
} }  // namespace c10

namespace ka {
// C++ type <-> ScalarType, one list for both directions
#define KA_SCALAR_TYPES(X)                                                                                \
  X(float, Float) X(double, Double) X(c10::Half, Half) X(c10::BFloat16, BFloat16) X(int64_t, Long)        \
  X(int32_t, Int) X(int16_t, Short) X(int8_t, Char) X(uint8_t, Byte) X(bool, Bool)
template <class T> struct type_of;
template <c10::ScalarType S> struct cpp_type;
#define KA_MAP(T, S)                                                                      \
  template <> struct type_of<T> { static constexpr c10::ScalarType value = c10::ScalarType::S; }; \
  template <> struct cpp_type<c10::ScalarType::S> { using type = T; };
KA_SCALAR_TYPES(KA_MAP)
#undef KA_MAP
#define KA_TYPE_OF(T, S) template <> struct type_of<T> { static constexpr c10::ScalarType value = c10::ScalarType::S; };
KA_TYPE_OF(uint16_t, UInt16)
KA_TYPE_OF(uint32_t, UInt32)
KA_TYPE_OF(uint64_t, UInt64)
#undef KA_TYPE_OF
}  // namespace ka

// ---- Scalar and TensorOptions -----------------------------------------------------------------------
namespace c10 { inline namespace kernelcourt_lite {
class Scalar {
 public:
  Scalar() : Scalar(int64_t(0)) {}
  template <class T, typename std::enable_if<std::is_integral<T>::value && !std::is_same<T, bool>::value, int>::type = 0>
  Scalar(T value) : kind_(KA_INT), i_(static_cast<int64_t>(value)) {}
  template <class T, typename std::enable_if<std::is_floating_point<T>::value, int>::type = 0>
  Scalar(T value) : kind_(KA_DOUBLE), d_(static_cast<double>(value)) {}
  Scalar(bool value) : kind_(KA_BOOL), i_(value ? 1 : 0) {}
  Scalar(Half value) : Scalar(static_cast<float>(value)) {}
  Scalar(BFloat16 value) : Scalar(static_cast<float>(value)) {}
  bool isFloatingPoint() const { return kind_ == KA_DOUBLE; }
  bool isIntegral(bool include_bool) const { return kind_ == KA_INT || (include_bool && kind_ == KA_BOOL); }
  bool isBoolean() const { return kind_ == KA_BOOL; }
  double toDouble() const { return kind_ == KA_DOUBLE ? d_ : static_cast<double>(i_); }
  float toFloat() const { return static_cast<float>(toDouble()); }
  int64_t toLong() const { return kind_ == KA_DOUBLE ? static_cast<int64_t>(d_) : i_; }
  int toInt() const { return static_cast<int>(toLong()); }
  bool toBool() const { return kind_ == KA_DOUBLE ? d_ != 0 : i_ != 0; }
  template <class T> T to() const {
    if (std::is_floating_point<T>::value) return static_cast<T>(toDouble());
    return static_cast<T>(toLong());
  }
  ka_value value() const {
    ka_value v{};
    v.tag = kind_;
    v.i = i_;
    v.d = d_;
    return v;
  }
  static Scalar from(const ka_value& v) {
    if (v.tag == KA_DOUBLE) return Scalar(v.d);
    if (v.tag == KA_BOOL) return Scalar(v.i != 0);
    return Scalar(v.i);
  }

 private:
  int32_t kind_;
  int64_t i_ = 0;
  double d_ = 0;
};
inline std::ostream& operator<<(std::ostream& out, const Scalar& s) {
  if (s.isFloatingPoint()) return out << s.toDouble();
  if (s.isBoolean()) return out << (s.toBool() ? "true" : "false");
  return out << s.toLong();
}

struct TensorOptions {
  TensorOptions() = default;
  TensorOptions(ScalarType type) { dtype_ = type; }
  TensorOptions(Device device) { device_ = device; }
  TensorOptions(DeviceType type) { device_ = Device(type); }
  TensorOptions(Layout layout) { layout_ = layout; }
  TensorOptions dtype(ScalarType type) const { auto o = *this; o.dtype_ = type; return o; }
  TensorOptions dtype(std::optional<ScalarType> type) const { auto o = *this; o.dtype_ = type; return o; }
  template <class T> TensorOptions dtype() const { return dtype(::ka::type_of<T>::value); }
  TensorOptions device(Device device) const { auto o = *this; o.device_ = device; return o; }
  TensorOptions device(DeviceType type, DeviceIndex index = -1) const { return device(Device(type, index)); }
  TensorOptions device(std::optional<Device> device) const { auto o = *this; o.device_ = device; return o; }
  TensorOptions device_index(DeviceIndex index) const { return device(Device(DeviceType::CUDA, index)); }
  TensorOptions layout(Layout layout) const { auto o = *this; o.layout_ = layout; return o; }
  TensorOptions requires_grad(bool flag) const { auto o = *this; o.requires_grad_ = flag; return o; }
  TensorOptions pinned_memory(bool flag) const { auto o = *this; o.pinned_ = flag; return o; }
  TensorOptions memory_format(MemoryFormat format) const { auto o = *this; o.memory_format_ = format; return o; }
  ScalarType dtype() const { return dtype_.value_or(ScalarType::Float); }
  Device device() const { return device_.value_or(Device(DeviceType::CPU)); }
  bool has_dtype() const { return dtype_.has_value(); }
  bool has_device() const { return device_.has_value(); }
  bool requires_grad() const { return requires_grad_.value_or(false); }
  std::optional<ScalarType> dtype_opt() const { return dtype_; }
  std::optional<Device> device_opt() const { return device_; }
  std::optional<ScalarType> dtype_;
  std::optional<Device> device_;
  std::optional<Layout> layout_;
  std::optional<bool> requires_grad_;
  std::optional<bool> pinned_;
  std::optional<MemoryFormat> memory_format_;
};
inline TensorOptions dtype(ScalarType type) { return TensorOptions().dtype(type); }
template <class T> TensorOptions dtype() { return TensorOptions().dtype<T>(); }
inline TensorOptions device(Device device) { return TensorOptions().device(device); }
inline TensorOptions device(DeviceType type, DeviceIndex index = -1) { return TensorOptions().device(type, index); }
inline TensorOptions layout(Layout layout) { return TensorOptions().layout(layout); }
inline TensorOptions requires_grad(bool flag = true) { return TensorOptions().requires_grad(flag); }
} }  // namespace c10

// ---- calling PyTorch ---------------------------------------------------------------------------------
namespace at { inline namespace kernelcourt_lite { class Tensor; } }

namespace ka {
struct Lists {  // storage for list arguments during one call
  std::vector<std::vector<ka_value>> items;
};
template <class T>
struct Kw {
  const char* name;
  const T& value;
};
template <class T>
Kw<T> kw(const char* name, const T& value) { return Kw<T>{name, value}; }

inline ka_value value_of(int64_t i, int32_t tag) {
  ka_value v{};
  v.tag = tag;
  v.i = i;
  return v;
}
inline ka_value arg(const at::Tensor& t, Lists&);
inline ka_value arg(const c10::Scalar& s, Lists&) { return s.value(); }
inline ka_value arg(int64_t i, Lists&) { return value_of(i, KA_INT); }
inline ka_value arg(int i, Lists&) { return value_of(i, KA_INT); }
inline ka_value arg(double d, Lists&) { ka_value v{}; v.tag = KA_DOUBLE; v.d = d; return v; }
inline ka_value arg(bool b, Lists&) { return value_of(b ? 1 : 0, KA_BOOL); }
inline ka_value arg(c10::ScalarType s, Lists&) { return value_of(static_cast<int64_t>(s), KA_DTYPE); }
inline ka_value arg(c10::Layout l, Lists&) { return value_of(static_cast<int64_t>(l), KA_LAYOUT); }
inline ka_value arg(c10::MemoryFormat m, Lists&) { return value_of(static_cast<int64_t>(m), KA_MEMORY_FORMAT); }
inline ka_value arg(const c10::Device& d, Lists&) {
  ka_value v = value_of(static_cast<int64_t>(d.type()), KA_DEVICE);
  v.n = d.index();
  return v;
}
inline ka_value arg(c10::IntArrayRef values, Lists&) {
  ka_value v{};
  v.tag = KA_INTS;
  v.p = const_cast<int64_t*>(values.data());
  v.n = static_cast<int64_t>(values.size());
  return v;
}
inline ka_value arg(c10::ArrayRef<at::Tensor> values, Lists& lists);
inline ka_value arg(std::nullopt_t, Lists&) { return ka_value{}; }
template <class T>
ka_value arg(const std::optional<T>& value, Lists& lists) { return value ? arg(*value, lists) : ka_value{}; }
template <class T>
ka_value arg(const Kw<T>& named, Lists& lists) {
  ka_value v = arg(named.value, lists);
  v.name = named.name;
  return v;
}

template <class... A>
ka_value call(const char* name, const char* overload, const A&... args) {
  Lists lists;
  ka_value values[sizeof...(A) + 1] = {arg(args, lists)...};
  ka_value out{};
  char message[4096] = {0};
  const int32_t status = api().call_op(name, overload, values, static_cast<int32_t>(sizeof...(A)), &out, message,
                                       static_cast<int32_t>(sizeof(message)));
  if (status != KA_OK) raise(status, message);
  return out;
}
}  // namespace ka

namespace at { inline namespace kernelcourt_lite {
using c10::ArrayRef;
using c10::BFloat16;
using c10::Device;
using c10::DeviceType;
using c10::Half;
using c10::IntArrayRef;
using c10::Layout;
using c10::MemoryFormat;
using c10::Scalar;
using c10::ScalarType;
using c10::TensorOptions;
using c10::kBFloat16; using c10::kBool; using c10::kByte; using c10::kChar; using c10::kDouble; using c10::kFloat;
using c10::kHalf; using c10::kInt; using c10::kLong; using c10::kShort; using c10::kComplexFloat;
using c10::kComplexDouble; using c10::kComplexHalf; using c10::kUInt8; using c10::kInt8; using c10::kInt16;
using c10::kInt32; using c10::kInt64; using c10::kFloat16; using c10::kFloat32; using c10::kFloat64;
using c10::kFloat8_e5m2; using c10::kFloat8_e4m3fn; using c10::kUInt16; using c10::kUInt32; using c10::kUInt64;
using c10::kCPU; using c10::kCUDA; using c10::kMeta; using c10::kStrided;
using c10::dtype; using c10::device; using c10::layout; using c10::requires_grad;
using c10::nullopt; using c10::optional; using c10::toString; using c10::elementSize;
using c10::isFloatingType; using c10::isIntegralType; using c10::isComplexType;

struct DeprecatedTypeProperties {
  ScalarType scalar_type;
  bool cuda;
  ScalarType scalarType() const { return scalar_type; }
  bool is_cuda() const { return cuda; }
  operator ScalarType() const { return scalar_type; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(void* owned_handle) : handle_(owned_handle) {}
  Tensor(const Tensor& other) : handle_(other.handle_ ? ::ka::api().share(other.handle_) : nullptr) {}
  Tensor(Tensor&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  Tensor& operator=(const Tensor& other) {
    if (this != &other) {
      Tensor copy(other);
      std::swap(handle_, copy.handle_);
    }
    return *this;
  }
  Tensor& operator=(Tensor&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~Tensor() {
    if (handle_) ::ka::api().release(handle_);
  }
  void* handle() const { return handle_; }
  void* release_handle() { void* h = handle_; handle_ = nullptr; return h; }
  bool defined() const { return handle_ != nullptr; }
  void reset() { Tensor().swap(*this); }
  void swap(Tensor& other) noexcept { std::swap(handle_, other.handle_); }

  int64_t dim() const { return ::ka::api().dim(need("dim")); }
  int64_t ndimension() const { return dim(); }
  int64_t numel() const { return ::ka::api().numel(need("numel")); }
  IntArrayRef sizes() const { return IntArrayRef(::ka::api().sizes(need("sizes")), static_cast<size_t>(dim())); }
  IntArrayRef strides() const {
    return IntArrayRef(::ka::api().strides(need("strides")), static_cast<size_t>(dim()));
  }
  int64_t size(int64_t d) const { return sizes()[wrap(d)]; }
  int64_t stride(int64_t d) const { return strides()[wrap(d)]; }
  int64_t storage_offset() const { return ::ka::api().storage_offset(need("storage_offset")); }
  ScalarType scalar_type() const { return static_cast<ScalarType>(::ka::api().scalar_type(need("scalar_type"))); }
  ScalarType dtype() const { return scalar_type(); }
  DeprecatedTypeProperties type() const { return DeprecatedTypeProperties{scalar_type(), is_cuda()}; }
  Device device() const {
    void* h = need("device");
    return Device(static_cast<DeviceType>(::ka::api().device_type(h)),
                  static_cast<c10::DeviceIndex>(::ka::api().device_index(h)));
  }
  int64_t get_device() const { return is_cuda() ? device().index() : -1; }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_meta() const { return device().is_meta(); }
  bool is_contiguous(MemoryFormat format = MemoryFormat::Contiguous) const {
    return ::ka::api().is_contiguous(need("is_contiguous"), static_cast<int32_t>(format)) != 0;
  }
  bool requires_grad() const { return ::ka::api().requires_grad(need("requires_grad")) != 0; }
  int64_t element_size() const { return ::ka::api().element_size(need("element_size")); }
  int64_t itemsize() const { return element_size(); }
  int64_t nbytes() const { return numel() * element_size(); }
  bool is_floating_point() const { return isFloatingType(scalar_type()); }
  TensorOptions options() const { return TensorOptions().dtype(scalar_type()).device(device()); }
  Layout layout() const { return Layout::Strided; }

  void* data_ptr() const { return ::ka::api().data_ptr(need("data_ptr")); }
  const void* const_data_ptr() const { return data_ptr(); }
  void* mutable_data_ptr() const { return data_ptr(); }
  template <class T>
  T* data_ptr() const {
    constexpr ScalarType wanted = ::ka::type_of<typename std::remove_cv<T>::type>::value;
    TORCH_CHECK(scalar_type() == wanted, "expected scalar type ", wanted, " but found ", scalar_type());
    return static_cast<T*>(data_ptr());
  }
  template <class T> const T* const_data_ptr() const { return data_ptr<typename std::remove_const<T>::type>(); }
  template <class T> T* mutable_data_ptr() const { return data_ptr<T>(); }

  Scalar item() const {
    ka_value out = ::ka::call("aten::item", "", *this);
    return Scalar::from(out);
  }
  template <class T> T item() const { return item().to<T>(); }

  // views, copies and conversions (through PyTorch's dispatcher)
  Tensor contiguous(MemoryFormat format = MemoryFormat::Contiguous) const {
    return op("aten::contiguous", "", *this, ::ka::kw("memory_format", format));
  }
  Tensor view(IntArrayRef shape) const { return op("aten::view", "", *this, shape); }
  Tensor reshape(IntArrayRef shape) const { return op("aten::reshape", "", *this, shape); }
  Tensor view_as(const Tensor& other) const { return view(other.sizes()); }
  Tensor reshape_as(const Tensor& other) const { return reshape(other.sizes()); }
  Tensor flatten(int64_t start = 0, int64_t end = -1) const {
    return op("aten::flatten", "using_ints", *this, start, end);
  }
  Tensor transpose(int64_t a, int64_t b) const { return op("aten::transpose", "int", *this, a, b); }
  Tensor t() const { return op("aten::t", "", *this); }
  Tensor permute(IntArrayRef order) const { return op("aten::permute", "", *this, order); }
  Tensor unsqueeze(int64_t d) const { return op("aten::unsqueeze", "", *this, d); }
  Tensor squeeze() const { return op("aten::squeeze", "", *this); }
  Tensor squeeze(int64_t d) const { return op("aten::squeeze", "dim", *this, d); }
  Tensor expand(IntArrayRef shape, bool implicit = false) const {
    return op("aten::expand", "", *this, shape, ::ka::kw("implicit", implicit));
  }
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor narrow(int64_t d, int64_t start, int64_t length) const {
    return op("aten::narrow", "", *this, d, start, length);
  }
  Tensor select(int64_t d, int64_t index) const { return op("aten::select", "int", *this, d, index); }
  Tensor slice(int64_t d = 0, std::optional<int64_t> start = std::nullopt, std::optional<int64_t> end = std::nullopt,
               int64_t step = 1) const {
    return op("aten::slice", "Tensor", *this, d, start, end, step);
  }
  Tensor index_select(int64_t d, const Tensor& index) const {
    return op("aten::index_select", "", *this, d, index);
  }
  Tensor clone() const { return op("aten::clone", "", *this); }
  Tensor detach() const { return op("aten::detach", "", *this); }
  Tensor& copy_(const Tensor& src, bool non_blocking = false) {
    return in_place(::ka::call("aten::copy_", "", *this, src, non_blocking));
  }
  Tensor& fill_(const Scalar& value) { return in_place(::ka::call("aten::fill_", "Scalar", *this, value)); }
  Tensor& zero_() { return in_place(::ka::call("aten::zero_", "", *this)); }
  Tensor to(ScalarType type, bool non_blocking = false, bool copy = false) const {
    return op("aten::to", "dtype", *this, type, non_blocking, copy);
  }
  Tensor to(Device device, ScalarType type, bool non_blocking = false, bool copy = false) const {
    return op("aten::to", "device", *this, device, type, non_blocking, copy);
  }
  Tensor to(Device device, bool non_blocking = false, bool copy = false) const {
    return to(device, scalar_type(), non_blocking, copy);
  }
  Tensor to(DeviceType type, bool non_blocking = false, bool copy = false) const {
    return to(Device(type), non_blocking, copy);
  }
  Tensor to(const TensorOptions& o, bool non_blocking = false, bool copy = false) const {
    return to(o.device_.value_or(device()), o.dtype_.value_or(scalar_type()), non_blocking, copy);
  }
  Tensor to(const Tensor& other, bool non_blocking = false, bool copy = false) const {
    return to(other.device(), other.scalar_type(), non_blocking, copy);
  }
  Tensor cuda() const { return to(Device(DeviceType::CUDA)); }
  Tensor cpu() const { return to(Device(DeviceType::CPU)); }
  Tensor float_() const { return to(ScalarType::Float); }

  // arithmetic and reductions
  Tensor add(const Tensor& o, const Scalar& alpha = 1) const { return op("aten::add", "Tensor", *this, o, ::ka::kw("alpha", alpha)); }
  Tensor add(const Scalar& o, const Scalar& alpha = 1) const { return op("aten::add", "Scalar", *this, o, ::ka::kw("alpha", alpha)); }
  Tensor sub(const Tensor& o, const Scalar& alpha = 1) const { return op("aten::sub", "Tensor", *this, o, ::ka::kw("alpha", alpha)); }
  Tensor sub(const Scalar& o, const Scalar& alpha = 1) const { return op("aten::sub", "Scalar", *this, o, ::ka::kw("alpha", alpha)); }
  Tensor mul(const Tensor& o) const { return op("aten::mul", "Tensor", *this, o); }
  Tensor mul(const Scalar& o) const { return op("aten::mul", "Scalar", *this, o); }
  Tensor div(const Tensor& o) const { return op("aten::div", "Tensor", *this, o); }
  Tensor div(const Scalar& o) const { return op("aten::div", "Scalar", *this, o); }
  Tensor& add_(const Tensor& o, const Scalar& alpha = 1) { return in_place(::ka::call("aten::add_", "Tensor", *this, o, ::ka::kw("alpha", alpha))); }
  Tensor& add_(const Scalar& o, const Scalar& alpha = 1) { return in_place(::ka::call("aten::add_", "Scalar", *this, o, ::ka::kw("alpha", alpha))); }
  Tensor& sub_(const Tensor& o, const Scalar& alpha = 1) { return in_place(::ka::call("aten::sub_", "Tensor", *this, o, ::ka::kw("alpha", alpha))); }
  Tensor& sub_(const Scalar& o, const Scalar& alpha = 1) { return in_place(::ka::call("aten::sub_", "Scalar", *this, o, ::ka::kw("alpha", alpha))); }
  Tensor& mul_(const Tensor& o) { return in_place(::ka::call("aten::mul_", "Tensor", *this, o)); }
  Tensor& mul_(const Scalar& o) { return in_place(::ka::call("aten::mul_", "Scalar", *this, o)); }
  Tensor& div_(const Tensor& o) { return in_place(::ka::call("aten::div_", "Tensor", *this, o)); }
  Tensor& div_(const Scalar& o) { return in_place(::ka::call("aten::div_", "Scalar", *this, o)); }
  Tensor matmul(const Tensor& o) const { return op("aten::matmul", "", *this, o); }
  Tensor mm(const Tensor& o) const { return op("aten::mm", "", *this, o); }
  Tensor bmm(const Tensor& o) const { return op("aten::bmm", "", *this, o); }
  Tensor neg() const { return op("aten::neg", "", *this); }
  Tensor abs() const { return op("aten::abs", "", *this); }
  Tensor exp() const { return op("aten::exp", "", *this); }
  Tensor log() const { return op("aten::log", "", *this); }
  Tensor sqrt() const { return op("aten::sqrt", "", *this); }
  Tensor relu() const { return op("aten::relu", "", *this); }
  Tensor sigmoid() const { return op("aten::sigmoid", "", *this); }
  Tensor tanh() const { return op("aten::tanh", "", *this); }
  Tensor pow(const Scalar& e) const { return op("aten::pow", "Tensor_Scalar", *this, e); }
  Tensor sum() const { return op("aten::sum", "", *this); }
  Tensor sum(IntArrayRef dims, bool keepdim = false) const { return op("aten::sum", "dim_IntList", *this, dims, keepdim); }
  Tensor mean() const { return op("aten::mean", "", *this); }
  Tensor mean(IntArrayRef dims, bool keepdim = false) const {
    return op("aten::mean", "dim", *this, dims, keepdim);
  }
  Tensor max() const { return op("aten::max", "", *this); }
  Tensor min() const { return op("aten::min", "", *this); }

  template <class... A>
  static Tensor op(const char* name, const char* overload, const A&... args) {
    return Tensor(take(::ka::call(name, overload, args...)));
  }
  static void* take(ka_value out) {
    if (out.tag == KA_TENSOR) return out.p;
    TORCH_CHECK(out.tag == KA_NONE, "kernelcourt: expected a tensor result");
    return nullptr;
  }

 private:
  void* need(const char* what) const {
    TORCH_CHECK(handle_ != nullptr, what, "() called on an undefined Tensor");
    return handle_;
  }
  size_t wrap(int64_t d) const {
    const int64_t n = dim();
    const int64_t low = n > 0 ? -n : -1, high = n > 0 ? n - 1 : 0;
    TORCH_CHECK_INDEX(d >= low && d <= high, "Dimension out of range (expected to be in range of [", low, ", ",
                      high, "], but got ", d, ")");
    return static_cast<size_t>(d < 0 ? d + n : d);
  }
  Tensor& in_place(ka_value out) {
    Tensor dropped(take(out));  // the operator returns self: release that extra handle
    return *this;
  }
  void* handle_ = nullptr;
};
using TensorList = ArrayRef<Tensor>;

#define KA_BINARY(OP, NAME)                                                                                    \
  inline Tensor operator OP(const Tensor& a, const Tensor& b) { return Tensor::op("aten::" NAME, "Tensor", a, b); } \
  inline Tensor operator OP(const Tensor& a, const Scalar& b) { return Tensor::op("aten::" NAME, "Scalar", a, b); }
KA_BINARY(+, "add")
KA_BINARY(-, "sub")
KA_BINARY(*, "mul")
KA_BINARY(/, "div")
KA_BINARY(==, "eq")
KA_BINARY(!=, "ne")
KA_BINARY(<, "lt")
KA_BINARY(<=, "le")
KA_BINARY(>, "gt")
KA_BINARY(>=, "ge")
#undef KA_BINARY
inline Tensor operator+(const Scalar& a, const Tensor& b) { return b.add(a); }
inline Tensor operator*(const Scalar& a, const Tensor& b) { return b.mul(a); }
inline Tensor operator-(const Scalar& a, const Tensor& b) { return Tensor::op("aten::rsub", "Scalar", b, a); }
inline Tensor operator/(const Scalar& a, const Tensor& b) { return Tensor::op("aten::reciprocal", "", b).mul(a); }
inline Tensor operator-(const Tensor& a) { return a.neg(); }
inline Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
inline Tensor& operator+=(Tensor& a, const Scalar& b) { return a.add_(b); }
inline Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
inline Tensor& operator-=(Tensor& a, const Scalar& b) { return a.sub_(b); }
inline Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
inline Tensor& operator*=(Tensor& a, const Scalar& b) { return a.mul_(b); }
inline Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
inline Tensor& operator/=(Tensor& a, const Scalar& b) { return a.div_(b); }

// factories: the options become the operators' keyword arguments, as at:: does
namespace detail {
template <class... A>
Tensor factory(const char* name, const char* overload, const TensorOptions& o, const A&... args) {
  Tensor out = Tensor::op(name, overload, args..., ::ka::kw("dtype", o.dtype_), ::ka::kw("layout", o.layout_),
                          ::ka::kw("device", o.device_), ::ka::kw("pin_memory", o.pinned_));
  if (o.requires_grad()) Tensor(Tensor::take(::ka::call("aten::requires_grad_", "", out, true)));
  return out;
}
template <class... A>
Tensor factory_fmt(const char* name, const char* overload, const TensorOptions& o,
                   std::optional<MemoryFormat> format, const A&... args) {
  if (!format) format = o.memory_format_;
  Tensor out = Tensor::op(name, overload, args..., ::ka::kw("dtype", o.dtype_), ::ka::kw("layout", o.layout_),
                          ::ka::kw("device", o.device_), ::ka::kw("pin_memory", o.pinned_),
                          ::ka::kw("memory_format", format));
  if (o.requires_grad()) Tensor(Tensor::take(::ka::call("aten::requires_grad_", "", out, true)));
  return out;
}
}  // namespace detail

inline Tensor empty(IntArrayRef size, const TensorOptions& o = {}, std::optional<MemoryFormat> f = std::nullopt) {
  return detail::factory_fmt("aten::empty", "memory_format", o, f, size);
}
inline Tensor empty_strided(IntArrayRef size, IntArrayRef stride, const TensorOptions& o = {}) {
  return detail::factory("aten::empty_strided", "", o, size, stride);
}
inline Tensor zeros(IntArrayRef size, const TensorOptions& o = {}) { return detail::factory("aten::zeros", "", o, size); }
inline Tensor ones(IntArrayRef size, const TensorOptions& o = {}) { return detail::factory("aten::ones", "", o, size); }
inline Tensor full(IntArrayRef size, const Scalar& value, const TensorOptions& o = {}) {
  return detail::factory("aten::full", "", o, size, value);
}
inline Tensor arange(const Scalar& end, const TensorOptions& o = {}) { return detail::factory("aten::arange", "", o, end); }
inline Tensor arange(const Scalar& start, const Scalar& end, const TensorOptions& o = {}) {
  return detail::factory("aten::arange", "start", o, start, end);
}
inline Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& o = {}) {
  return detail::factory("aten::arange", "start_step", o, start, end, step);
}
#define KA_LIKE(NAME)                                                                                           \
  inline Tensor NAME##_like(const Tensor& t, const TensorOptions& o = {},                                         \
                            std::optional<MemoryFormat> f = std::nullopt) {                                     \
    return detail::factory_fmt("aten::" #NAME "_like", "", o, f, t);                                            \
  }
KA_LIKE(empty)
KA_LIKE(zeros)
KA_LIKE(ones)
#undef KA_LIKE
inline Tensor full_like(const Tensor& t, const Scalar& value, const TensorOptions& o = {},
                        std::optional<MemoryFormat> f = std::nullopt) {
  return detail::factory_fmt("aten::full_like", "", o, f, t, value);
}

// free-function forms of common operators
inline Tensor matmul(const Tensor& a, const Tensor& b) { return a.matmul(b); }
inline Tensor mm(const Tensor& a, const Tensor& b) { return a.mm(b); }
inline Tensor bmm(const Tensor& a, const Tensor& b) { return a.bmm(b); }
inline Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta = 1,
                    const Scalar& alpha = 1) {
  return Tensor::op("aten::addmm", "", self, a, b, ::ka::kw("beta", beta), ::ka::kw("alpha", alpha));
}
inline Tensor cat(TensorList tensors, int64_t d = 0) { return Tensor::op("aten::cat", "", tensors, d); }
inline Tensor stack(TensorList tensors, int64_t d = 0) { return Tensor::op("aten::stack", "", tensors, d); }
inline Tensor relu(const Tensor& t) { return t.relu(); }
inline Tensor sigmoid(const Tensor& t) { return t.sigmoid(); }
inline Tensor tanh(const Tensor& t) { return t.tanh(); }
inline Tensor exp(const Tensor& t) { return t.exp(); }
inline Tensor log(const Tensor& t) { return t.log(); }
inline Tensor sqrt(const Tensor& t) { return t.sqrt(); }
inline Tensor abs(const Tensor& t) { return t.abs(); }
inline Tensor sum(const Tensor& t) { return t.sum(); }
inline Tensor mean(const Tensor& t) { return t.mean(); }
inline Tensor softmax(const Tensor& t, int64_t d, std::optional<ScalarType> type = std::nullopt) {
  return Tensor::op("aten::softmax", "int", t, d, type);
}
inline Tensor log_softmax(const Tensor& t, int64_t d, std::optional<ScalarType> type = std::nullopt) {
  return Tensor::op("aten::log_softmax", "int", t, d, type);
}
inline Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) {
  return Tensor::op("aten::where", "self", c, a, b);
}
inline std::optional<Device> device_of(const Tensor& t) {
  return t.defined() ? std::optional<Device>(t.device()) : std::nullopt;
}
inline ScalarType typeMetaToScalarType(ScalarType t) { return t; }

// PyTorch's intra-op thread pool; an exception in the body is rethrown here, as at::parallel_for does
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain_size, const F& body) {
  struct Context {
    const F* body;
    std::exception_ptr error;
    std::atomic_flag failed = ATOMIC_FLAG_INIT;
  } context{&body, nullptr};
  ::ka::api().parallel_for(
      begin, end, grain_size,
      [](void* raw, int64_t b, int64_t e) {
        auto* c = static_cast<Context*>(raw);
        try {
          (*c->body)(b, e);
        } catch (...) {
          if (!c->failed.test_and_set()) c->error = std::current_exception();
        }
      },
      &context);
  if (context.error) std::rethrow_exception(context.error);
}
inline int get_num_threads() { return ::ka::api().get_num_threads(); }
inline int get_thread_num() { return ::ka::api().get_thread_num(); }
inline bool in_parallel_region() { return ::ka::api().in_parallel_region() != 0; }
} }  // namespace at

namespace ka {
inline ka_value arg(const at::Tensor& t, Lists&) {
  ka_value v{};
  if (t.defined()) {
    v.tag = KA_TENSOR;
    v.p = t.handle();
  }
  return v;
}
inline ka_value arg(c10::ArrayRef<at::Tensor> values, Lists& lists) {
  std::vector<ka_value> items;
  for (const auto& t : values) items.push_back(arg(t, lists));
  lists.items.push_back(std::move(items));
  ka_value v{};
  v.tag = KA_TENSORS;
  v.p = lists.items.back().data();
  v.n = static_cast<int64_t>(lists.items.back().size());
  return v;
}
inline c10::ScalarType scalar_type_of(c10::ScalarType t) { return t; }
inline c10::ScalarType scalar_type_of(const at::DeprecatedTypeProperties& t) { return t.scalarType(); }
}  // namespace ka

namespace torch { inline namespace kernelcourt_lite {
using namespace at;  // NOLINT: torch:: is at:: plus the binding helpers, as in PyTorch
template <class F>
F wrap_pybind_function(F f) { return f; }
namespace indexing {}
} }  // namespace torch

// ---- AT_DISPATCH -------------------------------------------------------------------------------------
#define KA_CASE(ENUM, ...)                                 \
  case ENUM: {                                             \
    using scalar_t = ::ka::cpp_type<ENUM>::type;           \
    return __VA_ARGS__();                                  \
  }
#define KA_DISPATCH_DEFAULT(NAME, ka_st) \
  default:                               \
    throw ::c10::NotImplementedError(::ka::str('"', NAME, "\" not implemented for '", ka_st, "'"))
#define KA_FLOAT_CASES(...) KA_CASE(::c10::ScalarType::Double, __VA_ARGS__) KA_CASE(::c10::ScalarType::Float, __VA_ARGS__)
#define KA_INT_CASES(...)                                                                          \
  KA_CASE(::c10::ScalarType::Byte, __VA_ARGS__) KA_CASE(::c10::ScalarType::Char, __VA_ARGS__)      \
  KA_CASE(::c10::ScalarType::Int, __VA_ARGS__) KA_CASE(::c10::ScalarType::Long, __VA_ARGS__)      \
  KA_CASE(::c10::ScalarType::Short, __VA_ARGS__)
#define KA_DISPATCH(TYPE, NAME, CASES)                       \
  [&] {                                                      \
    const auto ka_st = ::ka::scalar_type_of(TYPE);           \
    switch (ka_st) { CASES KA_DISPATCH_DEFAULT(NAME, ka_st); } \
  }()
#define AT_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...) KA_DISPATCH(TYPE, NAME, KA_FLOAT_CASES(__VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND_HALF(TYPE, NAME, ...) \
  KA_DISPATCH(TYPE, NAME, KA_FLOAT_CASES(__VA_ARGS__) KA_CASE(::c10::ScalarType::Half, __VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND(T1, TYPE, NAME, ...) \
  KA_DISPATCH(TYPE, NAME, KA_FLOAT_CASES(__VA_ARGS__) KA_CASE(T1, __VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND2(T1, T2, TYPE, NAME, ...) \
  KA_DISPATCH(TYPE, NAME, KA_FLOAT_CASES(__VA_ARGS__) KA_CASE(T1, __VA_ARGS__) KA_CASE(T2, __VA_ARGS__))
#define AT_DISPATCH_INTEGRAL_TYPES(TYPE, NAME, ...) KA_DISPATCH(TYPE, NAME, KA_INT_CASES(__VA_ARGS__))
#define AT_DISPATCH_ALL_TYPES(TYPE, NAME, ...) KA_DISPATCH(TYPE, NAME, KA_FLOAT_CASES(__VA_ARGS__) KA_INT_CASES(__VA_ARGS__))
#define AT_DISPATCH_ALL_TYPES_AND(T1, TYPE, NAME, ...) \
  KA_DISPATCH(TYPE, NAME, KA_FLOAT_CASES(__VA_ARGS__) KA_INT_CASES(__VA_ARGS__) KA_CASE(T1, __VA_ARGS__))
#define AT_DISPATCH_REDUCED_FLOATING_TYPES(TYPE, NAME, ...) \
  KA_DISPATCH(TYPE, NAME, KA_CASE(::c10::ScalarType::Half, __VA_ARGS__) KA_CASE(::c10::ScalarType::BFloat16, __VA_ARGS__))

// ---- CUDA --------------------------------------------------------------------------------------------
#ifdef KA_LITE_CUDA
namespace c10 { inline namespace kernelcourt_lite {
namespace cuda {
class CUDAStream {
 public:
  CUDAStream(cudaStream_t stream, DeviceIndex index) : stream_(stream), index_(index) {}
  cudaStream_t stream() const { return stream_; }
  operator cudaStream_t() const { return stream_; }
  DeviceIndex device_index() const { return index_; }
  Device device() const { return Device(DeviceType::CUDA, index_); }
  void synchronize() const { cudaStreamSynchronize(stream_); }
  bool query() const { return cudaStreamQuery(stream_) == cudaSuccess; }
  bool operator==(const CUDAStream& o) const { return stream_ == o.stream_; }

 private:
  cudaStream_t stream_;
  DeviceIndex index_;
};
inline DeviceIndex current_device() { return static_cast<DeviceIndex>(::ka::api().current_device()); }
inline void set_device(DeviceIndex index) { ::ka::api().set_device(index); }
inline DeviceIndex device_count() {
  int count = 0;
  cudaGetDeviceCount(&count);
  return static_cast<DeviceIndex>(count);
}
inline CUDAStream getCurrentCUDAStream(DeviceIndex index = -1) {
  const DeviceIndex device = index < 0 ? current_device() : index;
  return CUDAStream(static_cast<cudaStream_t>(::ka::api().current_stream(device)), device);
}
inline CUDAStream getDefaultCUDAStream(DeviceIndex index = -1) {
  const DeviceIndex device = index < 0 ? current_device() : index;
  return CUDAStream(static_cast<cudaStream_t>(::ka::api().default_stream(device)), device);
}
class OptionalCUDAGuard {
 public:
  OptionalCUDAGuard() = default;
  explicit OptionalCUDAGuard(std::optional<Device> device) { if (device) set_device(*device); }
  explicit OptionalCUDAGuard(Device device) { set_device(device); }
  explicit OptionalCUDAGuard(DeviceIndex index) { set_index(index); }
  OptionalCUDAGuard(const OptionalCUDAGuard&) = delete;
  OptionalCUDAGuard& operator=(const OptionalCUDAGuard&) = delete;
  ~OptionalCUDAGuard() { reset(); }
  void set_device(Device device) {
    if (device.is_cuda()) set_index(device.index() < 0 ? c10::cuda::current_device() : device.index());
  }
  void set_index(DeviceIndex index) {
    if (original_ < 0) original_ = c10::cuda::current_device();
    ::ka::api().set_device(index);
    current_ = index;
  }
  void reset() {
    if (original_ >= 0) ::ka::api().set_device(original_);
    original_ = current_ = -1;
  }
  std::optional<Device> original_device() const {
    return original_ < 0 ? std::nullopt : std::optional<Device>(Device(DeviceType::CUDA, original_));
  }
  std::optional<Device> current_device() const {
    return current_ < 0 ? std::nullopt : std::optional<Device>(Device(DeviceType::CUDA, current_));
  }

 private:
  DeviceIndex original_ = -1, current_ = -1;
};
class CUDAGuard : public OptionalCUDAGuard {
 public:
  explicit CUDAGuard(Device device) : OptionalCUDAGuard(device) {}
  explicit CUDAGuard(DeviceIndex index) : OptionalCUDAGuard(index) {}
};
class CUDAStreamGuard {  // makes the stream current for its device (PyTorch's stream, not a new one)
 public:
  explicit CUDAStreamGuard(CUDAStream stream) : stream_(stream) {}
  CUDAStream current_stream() const { return stream_; }

 private:
  CUDAStream stream_;
};
}  // namespace cuda
} }  // namespace c10

namespace at { inline namespace kernelcourt_lite {
namespace cuda {
using c10::cuda::CUDAGuard;
using c10::cuda::CUDAStream;
using c10::cuda::CUDAStreamGuard;
using c10::cuda::OptionalCUDAGuard;
using c10::cuda::current_device;
using c10::cuda::device_count;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getDefaultCUDAStream;
using c10::cuda::set_device;
inline cudaDeviceProp* getCurrentDeviceProperties() {
  return static_cast<cudaDeviceProp*>(const_cast<void*>(::ka::api().device_properties(-1)));
}
inline cudaDeviceProp* getDeviceProperties(int64_t index) {
  return static_cast<cudaDeviceProp*>(const_cast<void*>(::ka::api().device_properties(static_cast<int32_t>(index))));
}
}  // namespace cuda
} }  // namespace at

#define C10_CUDA_CHECK(EXPR)                                                                                 \
  do {                                                                                                       \
    const cudaError_t ka_cuda_error = (EXPR);                                                                \
    if (ka_cuda_error != cudaSuccess)                                                                        \
      throw ::c10::Error(::ka::str("CUDA error: ", cudaGetErrorString(ka_cuda_error),                         \
                                   "\nCUDA kernel errors might be asynchronously reported at some other API ", \
                                   "call, so the stacktrace below might be incorrect."));                     \
  } while (0)
#define C10_CUDA_CHECK_WARN(EXPR)                                                                          \
  do {                                                                                                     \
    const cudaError_t ka_cuda_error = (EXPR);                                                              \
    if (ka_cuda_error != cudaSuccess) TORCH_WARN("CUDA warning: ", cudaGetErrorString(ka_cuda_error));     \
  } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
#define AT_CUDA_CHECK(EXPR) C10_CUDA_CHECK(EXPR)
#endif  // KA_LITE_CUDA

// ---- the pybind11 module definition ------------------------------------------------------------------
namespace ka {
template <class T, class = void> struct convert;

inline const char* tag_name(int32_t tag) {
  switch (tag) {
    case KA_NONE: return "None";
    case KA_TENSOR: return "Tensor";
    case KA_INT: return "int";
    case KA_DOUBLE: return "float";
    case KA_BOOL: return "bool";
    case KA_INTS: return "list of ints";
    case KA_TENSORS: return "list of tensors";
    case KA_DOUBLES: return "list of floats";
    case KA_STRING: return "str";
    default: return "value";
  }
}
[[noreturn]] inline void wrong(const ka_value& v, const char* wanted) {
  throw c10::TypeError(str("incompatible function arguments: expected ", wanted, ", got ", tag_name(v.tag)));
}

template <> struct convert<at::Tensor> {
  static at::Tensor from(const ka_value& v) {
    if (v.tag != KA_TENSOR) wrong(v, "Tensor");
    return at::Tensor(api().share(v.p));
  }
  static ka_value to(at::Tensor t) {
    ka_value v{};
    if (t.defined()) {
      v.tag = KA_TENSOR;
      v.p = t.release_handle();
    }
    return v;
  }
};
template <class T>
struct convert<T, typename std::enable_if<std::is_integral<T>::value && !std::is_same<T, bool>::value>::type> {
  static T from(const ka_value& v) {
    if (v.tag != KA_INT && v.tag != KA_BOOL) wrong(v, "int");
    return static_cast<T>(v.i);
  }
  static ka_value to(T x) { return value_of(static_cast<int64_t>(x), KA_INT); }
};
template <class T>
struct convert<T, typename std::enable_if<std::is_floating_point<T>::value>::type> {
  static T from(const ka_value& v) {
    if (v.tag == KA_DOUBLE) return static_cast<T>(v.d);
    if (v.tag == KA_INT) return static_cast<T>(v.i);
    wrong(v, "float");
  }
  static ka_value to(T x) {
    ka_value v{};
    v.tag = KA_DOUBLE;
    v.d = static_cast<double>(x);
    return v;
  }
};
template <> struct convert<bool> {
  static bool from(const ka_value& v) {
    if (v.tag != KA_BOOL && v.tag != KA_INT) wrong(v, "bool");
    return v.i != 0;
  }
  static ka_value to(bool b) { return value_of(b ? 1 : 0, KA_BOOL); }
};
template <> struct convert<c10::Scalar> {
  static c10::Scalar from(const ka_value& v) {
    if (v.tag != KA_INT && v.tag != KA_DOUBLE && v.tag != KA_BOOL) wrong(v, "number");
    return c10::Scalar::from(v);
  }
};
template <> struct convert<std::string> {
  static std::string from(const ka_value& v) {
    if (v.tag != KA_STRING) wrong(v, "str");
    return std::string(static_cast<const char*>(v.p), static_cast<size_t>(v.n));
  }
};
template <> struct convert<c10::ScalarType> {
  static c10::ScalarType from(const ka_value& v) {
    if (v.tag != KA_DTYPE) wrong(v, "torch.dtype");
    return static_cast<c10::ScalarType>(v.i);
  }
};
template <> struct convert<std::vector<int64_t>> {
  static std::vector<int64_t> from(const ka_value& v) {
    if (v.tag == KA_TENSORS && v.n == 0) return {};
    if (v.tag != KA_INTS) wrong(v, "list of ints");
    const auto* data = static_cast<const int64_t*>(v.p);
    return std::vector<int64_t>(data, data + v.n);
  }
};
template <> struct convert<c10::IntArrayRef> {  // valid for the call, as pybind11's is
  static c10::IntArrayRef from(const ka_value& v) {
    if (v.tag == KA_TENSORS && v.n == 0) return {};
    if (v.tag != KA_INTS) wrong(v, "list of ints");
    return c10::IntArrayRef(static_cast<const int64_t*>(v.p), static_cast<size_t>(v.n));
  }
};
template <> struct convert<std::vector<double>> {
  static std::vector<double> from(const ka_value& v) {
    if (v.tag == KA_INTS) {
      const auto* data = static_cast<const int64_t*>(v.p);
      return std::vector<double>(data, data + v.n);
    }
    if (v.tag != KA_DOUBLES) wrong(v, "list of floats");
    const auto* data = static_cast<const double*>(v.p);
    return std::vector<double>(data, data + v.n);
  }
};
template <> struct convert<std::vector<at::Tensor>> {
  static std::vector<at::Tensor> from(const ka_value& v) {
    if (v.tag == KA_INTS && v.n == 0) return {};
    if (v.tag != KA_TENSORS) wrong(v, "list of tensors");
    const auto* items = static_cast<const ka_value*>(v.p);
    std::vector<at::Tensor> out;
    for (int64_t i = 0; i < v.n; ++i) out.push_back(convert<at::Tensor>::from(items[i]));
    return out;
  }
  static ka_value to(std::vector<at::Tensor> values) {
    auto* items = static_cast<ka_value*>(std::calloc(values.size() + 1, sizeof(ka_value)));
    for (size_t i = 0; i < values.size(); ++i) items[i] = convert<at::Tensor>::to(std::move(values[i]));
    ka_value v{};
    v.tag = KA_TENSORS;
    v.p = items;
    v.n = static_cast<int64_t>(values.size());
    return v;
  }
};
template <class T> struct convert<std::optional<T>> {
  static std::optional<T> from(const ka_value& v) {
    if (v.tag == KA_NONE) return std::nullopt;
    return convert<T>::from(v);
  }
  static ka_value to(std::optional<T> value) { return value ? convert<T>::to(std::move(*value)) : ka_value{}; }
};
template <class... T> struct convert<std::tuple<T...>> {
  template <size_t... I>
  static ka_value pack(std::tuple<T...>& values, std::index_sequence<I...>) {
    auto* items = static_cast<ka_value*>(std::calloc(sizeof...(T) + 1, sizeof(ka_value)));
    (void)std::initializer_list<int>{(items[I] = convert<typename std::decay<T>::type>::to(std::move(std::get<I>(values))), 0)...};
    ka_value v{};
    v.tag = KA_TUPLE;
    v.p = items;
    v.n = static_cast<int64_t>(sizeof...(T));
    return v;
  }
  static ka_value to(std::tuple<T...> values) { return pack(values, std::index_sequence_for<T...>{}); }
};
template <class A, class B> struct convert<std::pair<A, B>> {
  static ka_value to(std::pair<A, B> values) {
    return convert<std::tuple<A, B>>::to(std::tuple<A, B>(std::move(values.first), std::move(values.second)));
  }
};

inline int32_t report(const std::exception& e, int32_t kind, char* err, int32_t errlen) {
  if (err != nullptr && errlen > 0) {
    std::strncpy(err, e.what(), static_cast<size_t>(errlen) - 1);
    err[errlen - 1] = '\0';
  }
  return kind;
}
template <class F>
int32_t guarded(F&& body, char* err, int32_t errlen) {
  try {
    body();
    return KA_OK;
  } catch (const c10::IndexError& e) {
    return report(e, KA_INDEX_ERROR, err, errlen);
  } catch (const c10::ValueError& e) {
    return report(e, KA_VALUE_ERROR, err, errlen);
  } catch (const c10::TypeError& e) {
    return report(e, KA_TYPE_ERROR, err, errlen);
  } catch (const std::exception& e) {
    return report(e, KA_RUNTIME_ERROR, err, errlen);
  } catch (...) {
    std::strncpy(err, "unknown C++ exception", static_cast<size_t>(errlen) - 1);
    return KA_RUNTIME_ERROR;
  }
}

struct Function {  // one m.def: a type-erased call plus what Python needs to know
  std::string name, doc;
  std::function<void(const ka_value*, int32_t, ka_value*)> call;
  int32_t nparams = -1;
  std::vector<std::string> names;
  std::vector<const char*> name_ptrs;
  std::vector<ka_value> defaults;
};

inline KA_HIDDEN std::vector<Function> defined_functions;  // this library's m.def()s
inline KA_HIDDEN std::vector<ka_function> exported_functions;
inline std::vector<Function>& registry() { return defined_functions; }

template <class R, class... A>
struct Caller {
  template <class F, size_t... I>
  static void run(F& f, const ka_value* args, ka_value* out, std::index_sequence<I...>) {
    std::tuple<typename std::decay<A>::type...> converted{convert<typename std::decay<A>::type>::from(args[I])...};
    finish(f, converted, out, std::index_sequence<I...>{}, std::is_void<R>{});
  }
  template <class F, class Tup, size_t... I>
  static void finish(F& f, Tup& converted, ka_value* out, std::index_sequence<I...>, std::false_type) {
    *out = convert<typename std::decay<R>::type>::to(f(std::get<I>(converted)...));
  }
  template <class F, class Tup, size_t... I>
  static void finish(F& f, Tup& converted, ka_value* out, std::index_sequence<I...>, std::true_type) {
    f(std::get<I>(converted)...);
    *out = ka_value{};
  }
  template <class F>
  static void fill(Function& fn, F f) {
    fn.nparams = static_cast<int32_t>(sizeof...(A));
    fn.call = [f](const ka_value* args, int32_t n, ka_value* out) mutable {
      if (n != static_cast<int32_t>(sizeof...(A)))
        throw c10::TypeError(str("incompatible function arguments: takes ", sizeof...(A), ", got ", n));
      run(f, args, out, std::index_sequence_for<A...>{});
    };
  }
};
template <class T> struct signature : signature<decltype(&T::operator())> {};
template <class R, class... A> struct signature<R (*)(A...)> { using caller = Caller<R, A...>; };
template <class R, class... A> struct signature<R(A...)> { using caller = Caller<R, A...>; };
template <class C, class R, class... A> struct signature<R (C::*)(A...) const> { using caller = Caller<R, A...>; };
template <class C, class R, class... A> struct signature<R (C::*)(A...)> { using caller = Caller<R, A...>; };
}  // namespace ka

namespace pybind11 { inline namespace kernelcourt_lite {
struct arg {
  explicit arg(const char* name) : name(name) {}
  template <class T>
  arg operator=(const T& value) const {
    arg with(*this);
    ::ka::Lists unused;
    with.value = ::ka::arg(value, unused);
    with.has_default = true;
    return with;
  }
  arg noconvert(bool = true) const { return *this; }
  arg none(bool = true) const { return *this; }
  const char* name;
  ka_value value{};
  bool has_default = false;
};
using arg_v = arg;
struct none {};

class module_ {
 public:
  template <class F, class... Extra>
  module_& def(const char* name, F&& f, const Extra&... extra) {
    ::ka::Function fn;
    fn.name = name;
    using Sig = ::ka::signature<typename std::decay<F>::type>;
    Sig::caller::fill(fn, f);
    (void)std::initializer_list<int>{(take(fn, extra), 0)...};
    if (!fn.names.empty()) {
      if (static_cast<int32_t>(fn.names.size()) != fn.nparams)
        throw c10::Error(::ka::str(name, ": ", fn.names.size(), " py::arg for ", fn.nparams, " parameters"));
      for (auto& n : fn.names) fn.name_ptrs.push_back(n.c_str());
    }
    ::ka::registry().push_back(std::move(fn));
    return *this;
  }
  std::string& doc() { return doc_; }

 private:
  static void take(::ka::Function& fn, const char* doc) { fn.doc = doc; }
  static void take(::ka::Function& fn, const arg& a) {
    fn.names.push_back(a.name);
    ka_value d = a.value;
    if (!a.has_default) d.tag = -1;
    fn.defaults.push_back(d);
  }
  std::string doc_;
};
using module = module_;
} }  // namespace pybind11
namespace py = pybind11;

namespace ka {
inline bool names_match(const ka_api* table) {  // our ScalarType numbers must be PyTorch's
  const std::pair<c10::ScalarType, const char*> known[] = {
      {c10::kByte, "Byte"}, {c10::kChar, "Char"}, {c10::kShort, "Short"}, {c10::kInt, "Int"},
      {c10::kLong, "Long"}, {c10::kHalf, "Half"}, {c10::kFloat, "Float"}, {c10::kDouble, "Double"},
      {c10::kBool, "Bool"}, {c10::kBFloat16, "BFloat16"}, {c10::kComplexFloat, "ComplexFloat"}};
  for (const auto& entry : known)
    if (std::strcmp(table->scalar_type_name(static_cast<int32_t>(entry.first)), entry.second) != 0) return false;
  return true;
}
inline int32_t module_init(const ka_api* table, void (*body)(pybind11::module_&), const ka_function** functions,
                           int32_t* count, char* err, int32_t errlen) {
  auto& exported = exported_functions;
  return guarded(
      [&] {
        if (table == nullptr || table->version != KA_ABI_VERSION) throw c10::Error("kernelcourt: bridge version mismatch");
        if (!names_match(table)) throw c10::Error("kernelcourt: scalar type numbering differs from PyTorch's");
        api_slot() = table;
        pybind11::module_ module;
        auto& defined = registry();
        defined.clear();
        body(module);
        exported.clear();
        for (auto& fn : defined) {
          ka_function out{};
          out.name = fn.name.c_str();
          out.doc = fn.doc.c_str();
          out.self = &fn;
          out.call = [](void* self, const ka_value* args, int32_t n, ka_value* result, char* e, int32_t elen) {
            auto* f = static_cast<::ka::Function*>(self);
            return guarded([&] { f->call(args, n, result); }, e, elen);
          };
          out.nparams = fn.nparams;
          out.arg_names = fn.name_ptrs.empty() ? nullptr : fn.name_ptrs.data();
          out.arg_defaults = fn.defaults.empty() ? nullptr : fn.defaults.data();
          exported.push_back(out);
        }
        *functions = exported.data();
        *count = static_cast<int32_t>(exported.size());
      },
      err, errlen);
}
}  // namespace ka

#define PYBIND11_MODULE(name, variable)                                                                     \
  static void kernelcourt_module_body(::pybind11::module_& variable);                                      \
  extern "C" __attribute__((visibility("default"))) int32_t kernelcourt_lite_init(                          \
      const ka_api* api, const ka_function** functions, int32_t* count, char* err, int32_t errlen) {      \
    return ::ka::module_init(api, &kernelcourt_module_body, functions, count, err, errlen);                 \
  }                                                                                                         \
  static void kernelcourt_module_body(::pybind11::module_& variable)

#endif  // KERNELCOURT_LITE_H
