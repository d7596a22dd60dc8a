/* The collector's operator-capture entry points, as a plain C table.
 *
 * A framework extension (dc_torch's RecordFunction callback, built against
 * the installed torch) gets this table from `Collector.capture_api()` as a
 * capsule named DC_CAPTURE_CAPSULE and calls it from operator callbacks on any
 * thread, with or without the GIL. Plain C, so the two shared objects need not
 * agree on a C++ ABI (the framework's may differ from this build's).
 *
 * Every enter is matched by one exit on the same thread, recorded or not.
 */
#ifndef DC_CAPTURE_API_H
#define DC_CAPTURE_API_H

#include <stdint.h>

#define DC_CAPTURE_CAPSULE "dc_core._native.capture_api"
#define DC_CAPTURE_ABI 7

/* op_enter flags.
 * DC_OP_REGION: a named region (an autograd.Function, a compiled region), not
 * an ATen op: ops inside it are not its inner ops, they keep their own context. */
#define DC_OP_REGION 1

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dc_capture_api {
  int32_t abi; /* DC_CAPTURE_ABI */
  /* The collector's operator capture (native/opcapture.h), opaque: passed
   * back as the first argument of every call below. */
  void* collector;
  /* Frame id of an operator named `name` (flagged backward when `backward`);
   * interns on first use, so callers cache it. */
  int64_t (*op_frame)(void* collector, const char* name, int32_t backward);
  /* An operator starts on the calling thread. `seq` is its autograd sequence
   * number (-1 if none) on the framework's thread `thread`. Frame -1: a
   * record that is not an operator of its own (its exit is still reported).
   * Returns the node the operator was recorded at, or -1 (not recorded: an
   * inner op in lightweight mode, or a skipped record). */
  int64_t (*op_enter)(void* collector, int64_t frame, int64_t seq, uint64_t thread, int32_t flags);
  /* A backward function starts: autograd node `frame` (an op_frame with
   * backward set) made by the forward op numbered `seq` on `forward_thread`. */
  int64_t (*backward_enter)(void* collector, int64_t frame, int64_t seq, uint64_t forward_thread);
  /* The calling thread's innermost operator ends; when it was recorded,
   * `value` of `metric` is added to its node (metric -1: nothing). */
  void (*op_exit)(void* collector, int64_t metric, int64_t value);
  /* Adds `value` of metric `metric` to the calling thread's innermost
   * recorded operator. */
  void (*op_add)(void* collector, int64_t metric, int64_t value);
  /* As op_frame, the frame's detail `detail` (e.g. "device": an aten::to
   * overload that moves a tensor between devices, not between dtypes). */
  int64_t (*op_frame_detail)(void* collector, const char* name, const char* detail,
                             int32_t backward);
  /* The capture failed inside a callback and stops (any thread, GIL or not):
   * the operators still open on any thread will never exit. From now on no
   * operator is recorded and no Python scope nests inside an open one; the
   * window keeps what was recorded before. */
  void (*abandon)(void* collector);
  /* The allocator took (`size` > 0) or gave back (`size` < 0) the block at
   * `ptr` on device (`device_type`, `device_index`), c10's numbering: billed
   * to the calling thread's innermost recorded operator, else its innermost
   * scope. `total_allocated`, `total_reserved`: the allocator's totals after
   * it (0: unknown). Ignored unless the collector's memory tracking is on. */
  void (*memory)(void* collector, uint64_t ptr, int64_t size, int32_t device_type,
                 int32_t device_index, uint64_t total_allocated, uint64_t total_reserved);
  /* The tracked block at `ptr` is of memory category `category`
   * (native/memory.h's MemCategory); with `only_temporary`, only if nothing
   * said otherwise yet. Returns whether `ptr` is tracked. */
  int32_t (*memory_mark)(void* collector, uint64_t ptr, int32_t category, int32_t only_temporary);
  /* The calling thread works for node `node` from now on (-1: for none): a
   * backend running a collective's work on a thread of its own, with the
   * issuing thread's state. While that thread is in no scope of its own its
   * operators record under a mirror of `node`'s context below the unscoped
   * phase, not under the phase alone. */
  void (*serve)(void* collector, int64_t node);
} dc_capture_api;

#ifdef __cplusplus
}
#endif

#endif /* DC_CAPTURE_API_H */
