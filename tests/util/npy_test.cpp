// npy: round trips per dtype, files numpy wrote (header versions 1-3, every supported dtype),
// files we wrote read back by numpy, and the refusals (magic, order, dtype, truncation).
#include "util/npy.h"

#include <filesystem>

#include "util/test_support.h"

namespace combiner::util {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::read_bytes;
using combiner::testing::run_python;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;

TEST(Npy, RoundTripsEachSavedDtype) {
  TempDir dir;
  const std::vector<torch::Tensor> tensors = {
      torch::randn({3, 4, 5}),
      torch::randint(0, 256, {7, 2}, torch::kUInt8),
      torch::randint(-(int64_t{1} << 40), int64_t{1} << 40, {11}, torch::kLong),
      torch::tensor(2.5f).reshape({}),      // 0-d
      torch::empty({0, 3}, torch::kFloat),  // empty
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = dir.file("t" + std::to_string(i) + ".npy");
    save_npy(path, tensors[i]);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    const torch::Tensor back = load_npy(path);
    EXPECT_EQ(back.scalar_type(), tensors[i].scalar_type()) << i;
    EXPECT_EQ(back.sizes(), tensors[i].sizes()) << i;
    EXPECT_TRUE(torch::equal(back, tensors[i])) << i;
    // numpy aligns the data to 64 bytes; our headers must too, so mmap readers are happy.
    EXPECT_EQ(parse_npy_header(read_bytes(path).data(), 128, path).data_offset % 64, 0u);
  }
}

TEST(Npy, SavesNonContiguousTensorsInLogicalOrder) {
  TempDir dir;
  const torch::Tensor t = torch::arange(12, torch::kFloat).reshape({3, 4}).t();
  save_npy(dir.file("t.npy"), t);
  EXPECT_TRUE(torch::equal(load_npy(dir.file("t.npy")), t));
}

TEST(Npy, ReadsWhatNumpyWrote) {
  TempDir dir;
  ASSERT_EQ(run_python(dir, R"(
from numpy.lib import format as f
a = np.arange(24).reshape(2, 3, 4)
np.save('f4.npy', (a * 0.5).astype('<f4'))
np.save('f8.npy', (a * 0.25).astype('<f8'))
np.save('u1.npy', (a * 10).astype(np.uint8))
np.save('i8.npy', (a - 1000000000000).astype('<i8'))
np.save('i4.npy', (a - 7).astype('<i4'))
np.save('scalar.npy', np.float32(3.0))
for v in [(2, 0), (3, 0)]:
    with open('v%d.npy' % v[0], 'wb') as fh:
        f.write_array(fh, a.astype('<f4'), version=v)
)"),
            0);
  const torch::Tensor a = torch::arange(24, torch::kLong).reshape({2, 3, 4});
  EXPECT_TRUE(torch::equal(load_npy(dir.file("f4.npy")), (a * 0.5).to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(load_npy(dir.file("f8.npy")), (a * 0.25).to(torch::kDouble)));
  EXPECT_TRUE(torch::equal(load_npy(dir.file("u1.npy")), (a * 10).to(torch::kUInt8)));
  EXPECT_TRUE(torch::equal(load_npy(dir.file("i8.npy")), a - 1000000000000));
  EXPECT_TRUE(torch::equal(load_npy(dir.file("i4.npy")), (a - 7).to(torch::kInt)));
  const torch::Tensor scalar = load_npy(dir.file("scalar.npy"));
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<float>(), 3.0f);
  for (const char* name : {"v2.npy", "v3.npy"})
    EXPECT_TRUE(torch::equal(load_npy(dir.file(name)), a.to(torch::kFloat))) << name;
}

TEST(Npy, NumpyReadsWhatWeWrote) {
  TempDir dir;
  save_npy(dir.file("f.npy"), torch::arange(6, torch::kFloat).reshape({2, 3}) / 4);
  save_npy(dir.file("u.npy"), torch::arange(200, 206, torch::kLong).to(torch::kUInt8));
  save_npy(dir.file("l.npy"), torch::tensor({int64_t{-5}, int64_t{1} << 50}));
  EXPECT_EQ(run_python(dir, R"(
f = np.load('f.npy'); u = np.load('u.npy'); l = np.load('l.npy')
assert f.dtype == np.float32 and f.shape == (2, 3) and (f == np.arange(6).reshape(2, 3) / 4).all()
assert u.dtype == np.uint8 and (u == np.arange(200, 206)).all()
assert l.dtype == np.int64 and l.tolist() == [-5, 1 << 50]
)"),
            0);
}

TEST(Npy, RefusesBadFiles) {
  TempDir dir;
  ASSERT_EQ(run_python(dir, R"(
np.save('fortran.npy', np.asfortranarray(np.ones((3, 4), np.float32)))
np.save('big.npy', np.ones(3, '>f4'))
np.save('half.npy', np.ones(3, np.float16))
np.save('rec.npy', np.zeros(2, dtype=[('a', '<i4'), ('b', '<f4')]))
np.save('good.npy', np.arange(100, dtype=np.float32))
)"),
            0);
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("fortran.npy")); },
                                        {"fortran.npy", "fortran_order"});
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("big.npy")); }, {"big.npy", ">f4"});
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("half.npy")); },
                                        {"half.npy", "<f2"});
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("rec.npy")); }, {"rec.npy"});

  std::vector<uint8_t> good = read_bytes(dir.file("good.npy"));
  std::vector<uint8_t> truncated(good.begin(), good.end() - 4);
  write_bytes(dir.file("truncated.npy"), truncated);
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("truncated.npy")); },
                                        {"truncated.npy", "expected 400", "found 396"});
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  write_bytes(dir.file("long.npy"), longer);
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("long.npy")); },
                                        {"long.npy", "found 401"});
  std::vector<uint8_t> bad_magic = good;
  bad_magic[1] = 'X';
  write_bytes(dir.file("magic.npy"), bad_magic);
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("magic.npy")); },
                                        {"magic.npy", "magic"});
  write_bytes(dir.file("tiny.npy"), {0x93, 'N'});
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("tiny.npy")); }, {"tiny.npy"});
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("absent.npy")); }, {"absent.npy"});
  // The in-memory reader applies the same size check.
  expect_throw_with<std::runtime_error>(
      [&] { npy_from_bytes(truncated.data(), truncated.size(), "member"); },
      {"member", "found 396"});
  EXPECT_TRUE(torch::equal(npy_from_bytes(good.data(), good.size(), "member"),
                           torch::arange(100, torch::kFloat)));
}

TEST(Npy, SaveRefusesOtherDtypesAndUnwritablePaths) {
  TempDir dir;
  expect_throw_with<std::invalid_argument>(
      [&] { save_npy(dir.file("d.npy"), torch::ones({2}, torch::kDouble)); }, {"d.npy", "Double"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("d.npy")));
  const std::string path = dir.file("no_such_folder/x.npy");
  expect_throw_with<std::runtime_error>([&] { save_npy(path, torch::ones({2})); }, {path});
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Npy, FailedSaveKeepsThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("keep.npy");
  save_npy(path, torch::ones({3}));
  // A folder in the way of the .tmp file makes the write fail before path is touched.
  std::filesystem::create_directory(path + ".tmp");
  EXPECT_THROW(save_npy(path, torch::zeros({3})), std::runtime_error);
  EXPECT_TRUE(torch::equal(load_npy(path), torch::ones({3})));
}

}  // namespace
}  // namespace combiner::util
