/* The C interface between a candidate's host code compiled against the light headers
 * (kernelcourt_lite.h) and the bridge built once per toolchain with PyTorch's real headers
 * (gpu_workers/build/lite/bridge.cpp). Plain C so that both sides agree without sharing a C++ ABI. */
#ifndef KERNELCOURT_ABI_H
#define KERNELCOURT_ABI_H
#include <stddef.h>
#include <stdint.h>

#define KA_ABI_VERSION 2

enum ka_tag {
  KA_NONE = 0,
  KA_TENSOR = 1,   /* p: a tensor handle (owned by whoever made the value) */
  KA_INT = 2,      /* i */
  KA_DOUBLE = 3,   /* d */
  KA_BOOL = 4,     /* i */
  KA_INTS = 5,     /* p: const int64_t*, n */
  KA_TENSORS = 6,  /* p: ka_value* (tensors), n */
  KA_TUPLE = 7,    /* p: ka_value*, n */
  KA_DTYPE = 8,    /* i: the ScalarType's number */
  KA_DEVICE = 9,   /* i: device type, n: index (-1: none) */
  KA_STRING = 10,  /* p: const char*, n: length */
  KA_DOUBLES = 11, /* p: const double*, n */
  KA_LAYOUT = 12,  /* i */
  KA_MEMORY_FORMAT = 13 /* i */
};

typedef struct ka_value {
  int32_t tag;
  int32_t reserved;
  int64_t i;
  double d;
  void* p;
  int64_t n;
  const char* name; /* a keyword argument's name in ka_api.call_op; NULL: positional */
} ka_value;

enum ka_error_kind { KA_OK = 0, KA_RUNTIME_ERROR = 1, KA_VALUE_ERROR = 2, KA_TYPE_ERROR = 3, KA_INDEX_ERROR = 4 };

typedef struct ka_api {
  int32_t version;
  /* tensor handles */
  void (*release)(void* t);
  void* (*share)(void* t); /* another handle to the same tensor */
  int64_t (*dim)(void* t);
  const int64_t* (*sizes)(void* t);
  const int64_t* (*strides)(void* t);
  int64_t (*numel)(void* t);
  int64_t (*storage_offset)(void* t);
  int32_t (*scalar_type)(void* t);
  int32_t (*device_type)(void* t);
  int32_t (*device_index)(void* t);
  void* (*data_ptr)(void* t);
  int32_t (*is_contiguous)(void* t, int32_t memory_format);
  int32_t (*requires_grad)(void* t);
  int64_t (*element_size)(void* t);
  /* any ATen operator, by schema name and overload; returns a ka_error_kind, the message in err */
  int32_t (*call_op)(const char* name, const char* overload, const ka_value* args, int32_t nargs,
                     ka_value* out, char* err, int32_t errlen);
  /* CUDA state as PyTorch sees it (NULL / -1 on a CPU-only build) */
  void* (*current_stream)(int32_t device_index);
  void* (*default_stream)(int32_t device_index);
  int32_t (*current_device)(void);
  void (*set_device)(int32_t device_index);
  const void* (*device_properties)(int32_t device_index); /* const cudaDeviceProp* */
  const char* (*scalar_type_name)(int32_t scalar_type);
  void (*warn)(const char* message);
  /* PyTorch's intra-op thread pool (at::parallel_for); body must not throw */
  void (*parallel_for)(int64_t begin, int64_t end, int64_t grain, void (*body)(void* ctx, int64_t b, int64_t e),
                       void* ctx);
  int32_t (*get_num_threads)(void);
  int32_t (*get_thread_num)(void);
  int32_t (*in_parallel_region)(void);
} ka_api;

typedef struct ka_function {
  const char* name;
  const char* doc;
  void* self;
  /* converts args, calls the candidate's function, fills out; returns a ka_error_kind */
  int32_t (*call)(void* self, const ka_value* args, int32_t nargs, ka_value* out, char* err, int32_t errlen);
  int32_t nparams; /* -1: unknown */
  const char* const* arg_names; /* nparams entries or NULL */
  const ka_value* arg_defaults; /* nparams entries (tag -1: no default) or NULL */
} ka_function;

/* exported by the candidate's library */
typedef int32_t (*ka_init_fn)(const ka_api* api, const ka_function** functions, int32_t* count,
                              char* err, int32_t errlen);
#define KA_INIT_SYMBOL "kernelcourt_lite_init"

#endif
