// TensorBoard event files as an outside reader sees them (Python's protobuf, tests/event_reader.h):
// each kind of record, the file names' order, and a full disk mid-record.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "child_process.h"
#include "event_reader.h"
#include "util/event_file.h"
#include "util/test_support.h"
#include "util/tfrecord.h"

namespace combiner::util {
namespace {

using combiner::testing::decode_event_files;
using combiner::testing::event_files;
using combiner::testing::expect_throw_with;
using combiner::testing::file_size_limit;
using combiner::testing::message_in_child;
using combiner::testing::TempDir;

namespace fs = std::filesystem;

TEST(EventFile, EveryKindOfRecordDecodesInPython) {
  TempDir dir;
  const std::string folder = dir.file("tb");
  std::string path;
  {
    EventFile events(folder, 7, true);
    path = events.path();
    events.add_scalar("train/bpd", 8, 3.25);
    const auto png = image_grid_png("grid", torch::full({2, 3, 5, 1}, 200, torch::kUInt8), 2);
    events.add_image("samples", 9, png);
    events.add_text("config", 0, "    a: 1\n    b: \"x\"\n");
  }
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(folder));
  const auto files = decode_event_files({path}, dir.path());
  ASSERT_EQ(files.size(), 1u);
  const auto& f = files[0];
  EXPECT_EQ(f.records, 5);
  EXPECT_EQ(f.truncated_tail, 0);
  ASSERT_EQ(f.events.size(), 5u);
  EXPECT_EQ(f.events[0].kind, "version");
  EXPECT_EQ(f.events[0].step, 7);
  EXPECT_EQ(f.events[0].rest, "brain.Event:2");
  EXPECT_EQ(f.events[1].kind, "start");
  EXPECT_EQ(f.events[1].step, 7);
  EXPECT_EQ(f.events[2].kind, "scalar");
  EXPECT_EQ(f.events[2].tag, "train/bpd");
  EXPECT_EQ(f.events[2].step, 8);
  EXPECT_EQ(f.events[2].value(), 3.25);
  // A grid of 2 tiles of 3 x 5 at scale 2, in one row: 2 + 6 + 2 high, 2 + 10 + 2 + 10 + 2 wide,
  // grey (colorspace 1); the PNG's own header says the same.
  EXPECT_EQ(f.events[3].kind, "image");
  EXPECT_EQ(f.events[3].tag, "samples");
  EXPECT_EQ(f.events[3].rest, "10 26 1 26 10");
  EXPECT_EQ(f.events[4].kind, "text");
  EXPECT_EQ(f.events[4].rest, "text \"    a: 1\\n    b: \\\"x\\\"\\n\"");
}

TEST(EventFile, NewFilesSortAfterEarlierOnes) {
  TempDir dir;
  const std::string folder = dir.file("tb");
  std::vector<std::string> made;
  for (int i = 0; i < 3; ++i) made.push_back(EventFile(folder, i, false).path());
  EXPECT_EQ(event_files(folder), made);
  // Without `restart` a file holds the version record alone.
  const RecordScan scan = read_record_file(made[0]);
  ASSERT_EQ(scan.records.size(), 1u);
  EXPECT_NE(scan.records[0].find("brain.Event:2"), std::string::npos);
}

TEST(EventFile, AFullDiskIsNamedAndLeavesTheWholeRecordsReadable) {
  TempDir dir;
  const std::string folder = dir.file("tb");
  fs::create_directories(folder);
  const std::string message = message_in_child(file_size_limit(4096), [&] {
    EventFile events(folder, 0, false);
    events.add_scalar("a", 1, 1.0);
    events.add_text("big", 2, std::string(10000, 'x'));
  });
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  EXPECT_NE(message.find("events.out.tfevents."), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  const auto files = event_files(folder);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(fs::file_size(files[0]), 4096u);  // the text record was cut at the limit
  const RecordScan scan = read_record_file(files[0]);
  EXPECT_EQ(scan.records.size(), 2u);  // version and the scalar
  EXPECT_GT(scan.truncated_tail, 0u);
  const auto decoded = decode_event_files(files, dir.path());
  EXPECT_EQ(decoded[0].records, 2);
  EXPECT_EQ(decoded[0].truncated_tail, static_cast<int64_t>(scan.truncated_tail));
}

TEST(EventFile, AFolderThatCannotBeMadeIsNamed) {
  TempDir dir;
  std::ofstream(dir.file("plain")) << "a file, not a folder";
  const std::string folder = dir.file("plain/tb");
  expect_throw_with<std::runtime_error>([&] { EventFile events(folder, 0, false); },
                                        {folder, "cannot create the folder"});
}

}  // namespace
}  // namespace combiner::util
