// Timing and memory of attention variants, measured honestly: each case runs in its own child
// process (a fresh heap, so one case's peak cannot hide another's), the peak resident set is
// read from /proc/self/status after resetting it, and every variant is first checked against
// the dense reference at a small shape, as llm.c's kernel programs do before they time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::attention {

// One timed configuration. q, k, v are [batch, heads, length, dim] random inputs.
struct BenchCase {
  std::string variant = "full";
  int64_t length = 3072;          // L
  int64_t block = 96;             // s of the fixed layouts; 0 = default_layout(L) (resolve_layout)
  int64_t row_len = 96;           // W of the axial layouts; 0 = default_layout(L)
  int64_t batch = 1;              // B
  int64_t heads = 8;              // H
  int64_t dim = 64;               // D = Dv
  std::string dtype = "float32";  // float32 | bfloat16 | float64 (scores always >= fp32)
  std::string device = "cpu";     // cpu | cuda | cuda:N
  bool backward = false;          // time forward + backward (gradients of q, k, v)
  int64_t repeats = 5;            // timed runs after one warm-up; the median is reported
  int64_t threads = 0;            // LibTorch threads in the child; 0 = every core
  int64_t max_mib = 0;            // address-space allowance of the child beyond its start; 0 = none
  std::string path = "auto";      // auto | composed | fused (fused on the CPU: the kernels' model)
  std::string memory = "rss";     // CPU peak: rss (resident set) | tensors (bytes of live tensors)
  int64_t profile = 0;            // > 0: profile `repeats` more runs, top rows to stderr
  bool count = false;             // also count one run's launches, allocated and moved bytes
  double bandwidth_gbps = 0;      // > 0: the profile's launches as multiples of their floor
  // Where block / row_len came from (the CSV's layout column); not sent to the child.
  bool block_auto = false;
  bool row_len_auto = false;
};

// status: ok | oom (allocation failed or the child was killed by SIGKILL) | timeout | mismatch
// (fast path disagrees with the reference) | invalid (layout does not fit L) | error.
struct BenchResult {
  double ms = 0;        // median wall time of one run
  double peak_mib = 0;  // peak RSS or tensor bytes (CUDA: allocated device memory) minus before
  std::string status = "error";
  std::string detail;  // why, when status != ok
  // With BenchCase::count: device operations one run launches (tools/launch_count.h), the
  // bytes of the tensors it allocates, freed or not, and the bytes its fused kernels read and
  // write (distinct bytes per launch, summed: attention/fused/traffic.h); -1 when not counted.
  int64_t launches = -1;
  double allocated_mib = -1;
  double kernel_mib = -1;
};

// One call's cost by definition of SDPA flash (FlashAttention): one forward and, with the
// backward, one backward launch; allocated: o [B, H, L, D] and lse [B, H, L] (fp32), and dq, dk,
// dv with the backward; moved: q, k, v read and o, lse written, and with the backward q, k, v, o,
// dO and lse read and dq, dk, dv written. The floor a fused attention's counts are read against.
BenchResult flash_definition(const BenchCase& c);

// The rule for a layout the user did not give, as --help states it, and its name in the CSV's
// layout column.
constexpr const char* kDefaultLayoutRule =
    "the divisor of L nearest sqrt(L), the larger on a tie "
    "(L = 1024 -> 32, 4096 -> 64, 12288 -> 96, 16384 -> 128)";
constexpr const char* kAutoLayout = "auto:divisor-nearest-sqrt(L)";

// The divisor of `length` nearest sqrt(length), the larger on a tie. length > 0.
int64_t default_layout(int64_t length);

// Replaces block / row_len of 0 by default_layout(c.length) and records that they were.
BenchCase resolve_layout(BenchCase c);

// Why the case's variant and layout cannot run at its length (attention::validate's message),
// or "" when they can.
std::string invalid_reason(const BenchCase& c);

// "forward" or "forward+backward".
std::string pass_name(const BenchCase& c);

// Max abs error of the variant's float32 fast path against the float64 reference at a small
// shape (B = 1, H = 2, L = 36, s = W = 6, D = 8), over every abstraction.
double reference_error(const std::string& variant);

// The whole case in this process (layout resolved first): inputs, warm-up, `repeats` timed
// runs, peak memory.
// Allocation failures (including hitting max_mib) become status oom; other exceptions status
// error; a layout that does not fit L status invalid. With max_mib > 0 the address-space limit
// of this process is lowered for good, so only children should set it.
BenchResult time_case(const BenchCase& c);

// One line of text each way between the parent and its child.
std::string encode_case(const BenchCase& c);
BenchCase decode_case(const std::string& text);
std::string encode_result(const BenchResult& r);
BenchResult decode_result(const std::string& text);  // error status if the text is no result

// Runs argv (argv[0] a path to an executable) with stdout piped back, killing it after
// timeout_s; the answer is the child's last line that decode_result() accepts.
BenchResult run_child(const std::vector<std::string>& argv, double timeout_s);

// The results table, one row per case. block / row_len / layout are empty for variants that do
// not use them; layout is kAutoLayout (kDefaultLayoutRule) or "given" (--block / --row-len); ms and
// peak_mib are empty unless status is ok; detail never holds a comma. Columns:
// variant,L,block,row_len,layout,dtype,device,pass,batch,heads,dim,threads,ms,peak_mib,launches,
// allocated_mib,kernel_mib,status,detail (the three counts empty unless counted)
std::string csv_header();
std::string csv_row(const BenchCase& c, const BenchResult& r);

// MemAvailable of /proc/meminfo in MiB (0 if unreadable): the default max_mib of the children.
int64_t available_mib();

}  // namespace combiner::attention
