// Parsing, --set overrides, to_yaml round trips and key_paths: every kind of malformed input must
// be rejected with a message that names the source, the key path and what was wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/fields.h"
#include "config/load.h"
#include "config/scalar.h"
#include "config/test_util.h"

namespace combiner::config {
namespace {

using testing::expect_invalid;

// Compares every member by hand, independently of the field table under test.
void expect_equal(const Config& a, const Config& b) {
  EXPECT_EQ(a.data.dataset, b.data.dataset);
  EXPECT_EQ(a.data.dir, b.data.dir);
  EXPECT_EQ(a.data.val_size, b.data.val_size);
  EXPECT_EQ(a.data.height, b.data.height);
  EXPECT_EQ(a.data.width, b.data.width);
  EXPECT_EQ(a.data.channels, b.data.channels);
  EXPECT_EQ(a.data.bits, b.data.bits);
  EXPECT_EQ(a.model.layers, b.model.layers);
  EXPECT_EQ(a.model.width, b.model.width);
  EXPECT_EQ(a.model.heads, b.model.heads);
  EXPECT_EQ(a.model.mlp_ratio, b.model.mlp_ratio);
  EXPECT_EQ(a.model.dropout, b.model.dropout);
  EXPECT_EQ(a.model.attention.type, b.model.attention.type);
  EXPECT_EQ(a.model.attention.block, b.model.attention.block);
  EXPECT_EQ(a.model.attention.row_len, b.model.attention.row_len);
  EXPECT_EQ(a.model.attention.abstraction, b.model.attention.abstraction);
  const TrainConfig& s = a.train;
  const TrainConfig& t = b.train;
  EXPECT_EQ(s.steps, t.steps);
  EXPECT_EQ(s.batch_size, t.batch_size);
  EXPECT_EQ(s.grad_accum, t.grad_accum);
  EXPECT_EQ(s.lr, t.lr);  // exact: floats must round-trip bit for bit
  EXPECT_EQ(s.warmup_steps, t.warmup_steps);
  EXPECT_EQ(s.min_lr, t.min_lr);
  EXPECT_EQ(s.weight_decay, t.weight_decay);
  EXPECT_EQ(s.beta1, t.beta1);
  EXPECT_EQ(s.beta2, t.beta2);
  EXPECT_EQ(s.grad_clip, t.grad_clip);
  EXPECT_EQ(s.max_nonfinite_steps, t.max_nonfinite_steps);
  EXPECT_EQ(s.ema_decay, t.ema_decay);
  EXPECT_EQ(s.activation_checkpointing, t.activation_checkpointing);
  EXPECT_EQ(s.recompute_mlp, t.recompute_mlp);
  EXPECT_EQ(s.precision, t.precision);
  EXPECT_EQ(s.attention_path, t.attention_path);
  EXPECT_EQ(s.cuda_graph, t.cuda_graph);
  EXPECT_EQ(s.device, t.device);
  EXPECT_EQ(s.dist_timeout_s, t.dist_timeout_s);
  EXPECT_EQ(s.seed, t.seed);
  EXPECT_EQ(s.threads, t.threads);
  EXPECT_EQ(s.out_dir, t.out_dir);
  EXPECT_EQ(s.checkpoint_every, t.checkpoint_every);
  EXPECT_EQ(s.keep_checkpoints, t.keep_checkpoints);
  EXPECT_EQ(s.eval_every, t.eval_every);
  EXPECT_EQ(s.eval_batch_size, t.eval_batch_size);
  EXPECT_EQ(s.log_every, t.log_every);
  EXPECT_EQ(s.final_test, t.final_test);
  EXPECT_EQ(s.sample_every, t.sample_every);
  EXPECT_EQ(s.sample_count, t.sample_count);
  EXPECT_EQ(s.tensorboard, t.tensorboard);
}

// A config where every field differs from its default, with floats that need 17 digits.
Config unusual_config() {
  Config c;
  c.data.dataset = "cifar10";
  c.data.dir = "/tmp/some dir: with colon";
  c.data.val_size = 5000;
  c.data.height = 48;  // not cifar10's shape: parse_config reads what it is given
  c.data.width = 40;
  c.data.channels = 2;
  c.data.bits = 5;
  c.model.layers = 12;
  c.model.width = 384;
  c.model.heads = 6;
  c.model.mlp_ratio = 2;
  c.model.dropout = 0.1 + 0.2;  // 0.30000000000000004
  c.model.attention.type = "combiner-fixed";
  c.model.attention.block = 48;
  c.model.attention.row_len = 96;
  c.model.attention.abstraction = "deepsets-mean";
  TrainConfig& t = c.train;
  t.steps = 123456789012;
  t.batch_size = 64;
  t.grad_accum = 4;
  t.lr = 1.0 / 3.0;
  t.warmup_steps = 7;
  t.min_lr = 1e-300;
  t.weight_decay = 0.0;
  t.beta1 = 0.8999999999999999;
  t.beta2 = 0.999;
  t.grad_clip = 2.5;
  t.max_nonfinite_steps = 3;
  t.ema_decay = 0.9995;
  t.activation_checkpointing = "true";
  t.recompute_mlp = true;
  t.precision = "bfloat16";
  t.attention_path = "composed";
  t.cuda_graph = "off";
  t.device = "cuda:1";
  t.dist_timeout_s = 60;
  t.seed = 42;
  t.threads = 3;
  t.out_dir = "null";  // a string that YAML would read as null if unquoted
  t.checkpoint_every = 500;
  t.keep_checkpoints = 1;
  t.eval_every = 250;
  t.eval_batch_size = 128;
  t.log_every = 1;
  t.final_test = false;
  t.sample_every = 1000;
  t.sample_count = 4;
  t.tensorboard = false;
  return c;
}

TEST(ConfigKeys, KeyPathsListEveryFieldOnceInFileOrder) {
  const std::vector<std::string> expected = {"data.dataset",
                                             "data.dir",
                                             "data.val_size",
                                             "data.height",
                                             "data.width",
                                             "data.channels",
                                             "data.bits",
                                             "model.layers",
                                             "model.width",
                                             "model.heads",
                                             "model.mlp_ratio",
                                             "model.dropout",
                                             "model.attention.type",
                                             "model.attention.block",
                                             "model.attention.row_len",
                                             "model.attention.abstraction",
                                             "train.steps",
                                             "train.batch_size",
                                             "train.grad_accum",
                                             "train.lr",
                                             "train.warmup_steps",
                                             "train.min_lr",
                                             "train.weight_decay",
                                             "train.beta1",
                                             "train.beta2",
                                             "train.grad_clip",
                                             "train.max_nonfinite_steps",
                                             "train.ema_decay",
                                             "train.seed",
                                             "train.threads",
                                             "train.out_dir",
                                             "train.checkpoint_every",
                                             "train.keep_checkpoints",
                                             "train.eval_every",
                                             "train.eval_batch_size",
                                             "train.log_every",
                                             "train.final_test",
                                             "train.sample_every",
                                             "train.sample_count",
                                             "train.tensorboard",
                                             "train.activation_checkpointing",
                                             "train.recompute_mlp",
                                             "train.precision",
                                             "train.attention_path",
                                             "train.cuda_graph",
                                             "train.device",
                                             "train.dist_timeout_s"};
  const std::vector<std::string> paths = key_paths();
  EXPECT_EQ(paths, expected);
  EXPECT_EQ(std::set<std::string>(paths.begin(), paths.end()).size(), paths.size());
}

TEST(ConfigKeys, ToYamlWritesEveryKeyPath) {
  const std::string yaml = to_yaml(Config{});
  for (const auto& path : key_paths()) {
    const std::string leaf = path.substr(path.rfind('.') + 1);
    EXPECT_NE(yaml.find(leaf + ":"), std::string::npos) << path << " missing from\n" << yaml;
  }
}

TEST(ConfigRoundTrip, DefaultsReadBackEqual) {
  const Config defaults;
  expect_equal(parse_config(to_yaml(defaults), "defaults"), defaults);
}

TEST(ConfigRoundTrip, EveryFieldChangedReadsBackEqualAndPrintsTheSame) {
  const Config original = unusual_config();
  const std::string yaml = to_yaml(original);
  const Config read = parse_config(yaml, "round-trip");
  expect_equal(read, original);
  EXPECT_EQ(to_yaml(read), yaml);
}

TEST(ConfigRoundTrip, TheUnusualConfigChangesEveryField) {
  // Else a field could drop out of the round trip above unnoticed.
  for (const Field& field : fields())
    EXPECT_NE(format_value(field.get(unusual_config())), format_value(field.get(Config{})))
        << field.path;
}

// The line of `yaml` that holds the key path ("model.width": the "  width: " after "model:"),
// or "".
std::string line_of(const std::string& yaml, const std::string& path) {
  const std::string text = "\n" + yaml;
  size_t at = 0, depth = 0;
  for (size_t start = 0, dot = 0; dot != std::string::npos; start = dot + 1, ++depth) {
    dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    at = text.find("\n" + std::string(2 * depth, ' ') + part + ":", at);
    if (at == std::string::npos) return "";
  }
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST(DocumentedYaml, ReadsBackEqualAndGivesEveryKeysMeaningAndDefault) {
  for (const Config& c : {Config{}, unusual_config()}) {
    const std::string yaml = to_documented_yaml(c);
    const Config read = parse_config(yaml, "documented");
    expect_equal(read, c);
    EXPECT_EQ(to_yaml(read), to_yaml(c));
    for (const Field& field : fields()) {
      const std::string line = line_of(yaml, field.path);
      ASSERT_FALSE(line.empty()) << field.path << " missing from\n" << yaml;
      EXPECT_NE(line.find("# " + field.meaning), std::string::npos) << line;
      EXPECT_NE(line.find("; default " + format_value(field.get(Config{}))), std::string::npos)
          << line;
    }
  }
  // Ranges and choices too.
  const std::string yaml = to_documented_yaml(Config{});
  EXPECT_NE(line_of(yaml, "train.beta1").find("; in [0, 1); default 0.9"), std::string::npos);
  EXPECT_NE(line_of(yaml, "train.precision").find("one of: float32 bfloat16"), std::string::npos);
}

TEST(ReadConfig, DefaultsAndOverridesWithoutTheDataset) {
  const Config defaults = read_config_with_overrides("", {});
  expect_equal(defaults, Config{});
  // A folder that is not there and an `images` dataset without a shape: validate() would read
  // the packed header; this reads nothing and keeps the keys as given.
  const Config c = read_config_with_overrides(
      "", {"data.dataset=images", "data.dir=/nowhere", "train.lr=0.5", "train.min_lr=0"});
  EXPECT_EQ(c.data.dataset, "images");
  EXPECT_EQ(c.data.height, 0);
  EXPECT_EQ(c.model.attention.block, 0);
  EXPECT_EQ(c.train.lr, 0.5);
  expect_invalid([] { read_config_with_overrides("", {"train.lr=-1"}); },
                 {"defaults with --set overrides: train.lr: must be > 0, got -1"});
  expect_invalid([] { read_config_with_overrides("", {"train.warmup_steps=5000"}); },
                 {"train.warmup_steps: must be <= train.steps (1000)"});
}

TEST(ConfigRoundTrip, StringsThatLookLikeOtherTypesStayStrings) {
  for (const std::string s : {"", "123", "true", "~", "1.5", "- a", "a: b", "#x", "'q'"}) {
    Config c;
    c.data.dir = s;
    EXPECT_EQ(parse_config(to_yaml(c), "strings").data.dir, s) << to_yaml(c);
  }
}

TEST(ConfigParse, ReadsNestedKeysAndKeepsOtherDefaults) {
  const Config c = parse_config(
      "data:\n  dataset: cifar10\nmodel:\n  layers: 8\n  attention:\n    type: axial\n"
      "    row_len: 96\ntrain:\n  lr: 3e-4\n  final_test: no\n  out_dir: runs/x\n",
      "inline");
  EXPECT_EQ(c.data.dataset, "cifar10");
  EXPECT_EQ(c.model.layers, 8);
  EXPECT_EQ(c.model.attention.type, "axial");
  EXPECT_EQ(c.model.attention.row_len, 96);
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_FALSE(c.train.final_test);
  EXPECT_EQ(c.train.out_dir, "runs/x");
  EXPECT_EQ(c.model.width, Config{}.model.width);
  EXPECT_EQ(c.train.steps, Config{}.train.steps);
}

TEST(ConfigParse, EmptySectionSetsNothing) {
  expect_equal(parse_config("train:\nmodel:\n", "inline"), Config{});
}

TEST(ConfigParse, FloatKeysAcceptIntegersAndSignedExponents) {
  const Config c = parse_config("train:\n  lr: 1\n  min_lr: +1.5E-7\n  grad_clip: -0.0\n", "f");
  EXPECT_EQ(c.train.lr, 1.0);
  EXPECT_EQ(c.train.min_lr, 1.5e-7);
  EXPECT_EQ(c.train.grad_clip, 0.0);
}

TEST(ConfigParse, BoolSpellingsFollowYaml) {
  for (const std::string t : {"true", "True", "yes", "on"})
    EXPECT_TRUE(parse_config("train:\n  final_test: " + t + "\n", "b").train.final_test) << t;
  for (const std::string f : {"false", "FALSE", "no", "off"})
    EXPECT_FALSE(parse_config("train:\n  final_test: " + f + "\n", "b").train.final_test) << f;
}

// train.activation_checkpointing was a bool and takes auto too: every bool spelling still reads
// as the bool, written back unquoted; anything else is refused with the choices.
TEST(ConfigParse, ActivationCheckpointingTakesABoolOrAuto) {
  const auto read = [](const std::string& v) {
    return parse_config("train:\n  activation_checkpointing: " + v + "\n", "c")
        .train.activation_checkpointing;
  };
  for (const std::string t : {"true", "True", "yes", "on"}) EXPECT_EQ(read(t), "true") << t;
  for (const std::string f : {"false", "FALSE", "no", "off"}) EXPECT_EQ(read(f), "false") << f;
  EXPECT_EQ(read("auto"), "auto");
  Config c;
  apply_override(c, "train.activation_checkpointing=yes");
  EXPECT_EQ(c.train.activation_checkpointing, "true");
  EXPECT_NE(to_yaml(c).find("activation_checkpointing: true  #"), std::string::npos);
  apply_override(c, "train.activation_checkpointing=auto");
  EXPECT_NE(to_yaml(c).find("activation_checkpointing: \"auto\"  #"), std::string::npos);
  EXPECT_EQ(parse_config(to_yaml(c), "again").train.activation_checkpointing, "auto");
  for (const std::string bad : {"sometimes", "\"yes\"", "1"}) {
    SCOPED_TRACE(bad);
    c.train.activation_checkpointing = read(bad);
    expect_invalid([&] { check_values(c); },
                   {"train.activation_checkpointing: must be one of false, true, auto, got"});
  }
}

TEST(ConfigValues, PrecisionAutoIsBfloat16OnCudaAndFloat32OnTheCpu) {
  TrainConfig t;
  t.precision = "auto";
  EXPECT_EQ(precision_on(t, true), "bfloat16");
  EXPECT_EQ(precision_on(t, false), "float32");
  for (const std::string named : {"float32", "bfloat16"}) {
    t.precision = named;
    EXPECT_EQ(precision_on(t, true), named);
    EXPECT_EQ(precision_on(t, false), named);
  }
  Config c;
  apply_override(c, "train.precision=auto");
  EXPECT_NO_THROW(check_values(c));
  apply_override(c, "train.precision=half");
  expect_invalid([&] { check_values(c); },
                 {"train.precision: must be one of float32, bfloat16, auto, got 'half'"});
}

TEST(ConfigParse, UnknownNestedKeyNamesPathAndValidKeys) {
  expect_invalid([] { parse_config("train:\n  lrr: 0.1\n", "cfg.yaml"); },
                 {"cfg.yaml: unknown key 'train.lrr'",
                  "valid keys in 'train': steps, batch_size, grad_accum, lr,",
                  "sample_count"});
}

TEST(ConfigParse, UnknownTopLevelKeyListsSections) {
  expect_invalid([] { parse_config("foo: 1\n", "cfg.yaml"); },
                 {"cfg.yaml: unknown key 'foo'", "data, model, train"});
}

TEST(ConfigParse, UnknownAttentionKeyNamesFullPath) {
  expect_invalid([] { parse_config("model:\n  attention:\n    kind: full\n", "cfg.yaml"); },
                 {"unknown key 'model.attention.kind'",
                  "valid keys in 'model.attention': type, block, row_len, abstraction"});
}

TEST(ConfigParse, WrongScalarTypesNameKeyValueAndType) {
  struct Case {
    std::string yaml, key, value, expected;
  };
  const std::vector<Case> cases = {
      {"train:\n  steps: many\n", "train.steps", "'many'", "an integer"},
      {"train:\n  steps: 1.5\n", "train.steps", "'1.5'", "an integer"},
      {"train:\n  steps: 1e3\n", "train.steps", "'1e3'", "an integer"},
      {"train:\n  steps: \"100\"\n", "train.steps", "'100'", "an integer"},
      {"train:\n  steps: 99999999999999999999\n", "train.steps", "'9999", "an integer"},
      {"train:\n  lr: fast\n", "train.lr", "'fast'", "a float"},
      {"train:\n  lr: .inf\n", "train.lr", "'.inf'", "a float"},
      {"train:\n  lr: nan\n", "train.lr", "'nan'", "a float"},
      {"train:\n  final_test: maybe\n", "train.final_test", "'maybe'", "a bool"},
      {"train:\n  final_test: 1\n", "train.final_test", "'1'", "a bool"},
      {"train:\n  steps:\n", "train.steps", "null", "an integer"},
      {"model:\n  layers: {a: 1}\n", "model.layers", "a map", "an integer"},
      {"train:\n  lr: [1, 2]\n", "train.lr", "a sequence", "a float"},
      {"train:\n  out_dir: [a]\n", "train.out_dir", "a sequence", "a string"},
      {"model:\n  attention:\n    type: {x: 1}\n", "model.attention.type", "a map", "a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    expect_invalid([&] { parse_config(c.yaml, "cfg.yaml"); },
                   {"cfg.yaml: " + c.key + ": expected " + c.expected, c.value});
  }
}

TEST(ConfigParse, SectionGivenScalarOrSequenceIsRejected) {
  expect_invalid([] { parse_config("train: 5\n", "cfg.yaml"); },
                 {"cfg.yaml: 'train' must be a map with keys steps,", "got '5'"});
  expect_invalid([] { parse_config("model:\n  attention: [full]\n", "cfg.yaml"); },
                 {"'model.attention' must be a map with keys type, block", "a sequence"});
}

TEST(ConfigParse, EmptyOrNonMapDocumentIsRejected) {
  for (const std::string empty : {"", "\n", "# just a comment\n", "~\n"})
    expect_invalid([&] { parse_config(empty, "cfg.yaml"); },
                   {"cfg.yaml: config is empty", "data, model, train"});
  expect_invalid([] { parse_config("- a\n- b\n", "cfg.yaml"); },
                 {"cfg.yaml: expected a map", "a sequence"});
  expect_invalid([] { parse_config("hello\n", "cfg.yaml"); },
                 {"cfg.yaml: expected a map", "'hello'"});
  expect_invalid([] { parse_config("train:\n  steps: 1\n---\ntrain:\n  steps: 2\n", "c.yaml"); },
                 {"c.yaml: expected one YAML document, got 2"});
}

TEST(ConfigParse, MalformedYamlGivesSourceAndLine) {
  expect_invalid([] { parse_config("train:\n  steps: 1\n  lr: [1,\n", "cfg.yaml"); },
                 {"cfg.yaml: invalid YAML at line ", "column"});
  expect_invalid([] { parse_config("train:\n  steps: 1\n   lr: 2\n", "cfg.yaml"); },
                 {"cfg.yaml: invalid YAML at line 3"});
}

TEST(ConfigParse, DuplicateAndNonScalarKeysAreRejected) {
  expect_invalid([] { parse_config("train:\n  lr: 0.1\n  lr: 0.2\n", "cfg.yaml"); },
                 {"cfg.yaml: duplicate key 'train.lr'"});
  expect_invalid([] { parse_config("train:\n  ? [a]\n  : 1\n", "cfg.yaml"); },
                 {"cfg.yaml: keys in 'train' must be plain names"});
}

TEST(ConfigOverride, SetsEveryTypeIncludingNestedAttentionKeys) {
  Config c;
  apply_override(c, "train.steps=20");
  apply_override(c, "train.lr=2.5e-4");
  apply_override(c, "train.final_test=false");
  apply_override(c, "train.out_dir=runs/a=b");  // split at the first '=' only
  apply_override(c, "model.attention.type=combiner-fixed");
  apply_override(c, "model.attention.block=14");
  apply_override(c, "model.attention.abstraction='deepsets-max'");
  apply_override(c, "data.dir=");
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.train.lr, 2.5e-4);
  EXPECT_FALSE(c.train.final_test);
  EXPECT_EQ(c.train.out_dir, "runs/a=b");
  EXPECT_EQ(c.model.attention.type, "combiner-fixed");
  EXPECT_EQ(c.model.attention.block, 14);
  EXPECT_EQ(c.model.attention.abstraction, "deepsets-max");
  EXPECT_EQ(c.data.dir, "");
}

TEST(ConfigOverride, ErrorsNameTheAssignmentOrKey) {
  Config c;
  expect_invalid([&] { apply_override(c, "train.steps"); },
                 {"--set: expected key.path=value, got 'train.steps'"});
  expect_invalid([&] { apply_override(c, "=5"); }, {"--set: expected key.path=value"});
  expect_invalid([&] { apply_override(c, "train.lrr=0.1"); },
                 {"--set: unknown key 'train.lrr'", "valid keys in 'train': steps,"});
  expect_invalid([&] { apply_override(c, "foo=1"); },
                 {"--set: unknown key 'foo'", "data, model, train"});
  expect_invalid([&] { apply_override(c, "model.attention=full"); },
                 {"--set: 'model.attention' is a section", "type, block, row_len, abstraction"});
  expect_invalid([&] { apply_override(c, "train.steps=1.5"); },
                 {"--set: train.steps: expected an integer, got '1.5'"});
  expect_invalid([&] { apply_override(c, "train.steps="); },
                 {"--set: train.steps: expected an integer"});
  expect_invalid([&] { apply_override(c, "train.final_test=maybe"); },
                 {"--set: train.final_test: expected a bool", "'maybe'"});
  expect_invalid([&] { apply_override(c, "model.attention.type=[full"); },
                 {"--set: model.attention.type: invalid YAML value '[full'"});
  expect_invalid([&] { apply_override(c, "model.attention.type={a: 1}"); },
                 {"--set: model.attention.type: expected a string, got a map"});
  expect_equal(c, Config{});  // failed overrides change nothing
}

}  // namespace
}  // namespace combiner::config
