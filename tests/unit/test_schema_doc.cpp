// docs/report-schema.md against the JSON memsnap writes: every key of `memsnap at --format json`
// (memsnap.at/1), of a `memsnap blocks` line and of `rank_summary` is documented in its table,
// every documented key is written, and each object's fields are named in its row.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "test_support.h"

namespace memsnap {
namespace schema_doc_tests {

using Rows = std::map<std::string, std::string>;  // documented key -> its row

std::string schema_doc() {
  std::ifstream in(std::string(MEMSNAP_DATA_DIR) + "/../../docs/report-schema.md");
  std::stringstream s;
  s << "\n" << in.rdbuf();  // every heading follows a newline, the first one too
  return s.str();
}

// The rows of the `nth` table after the line starting with `heading`, by the backticked names of
// their first column ("`a`, `b`" gives two keys with the same row).
Rows table_after(const std::string& doc, const std::string& heading, int nth = 0) {
  Rows rows;
  std::size_t at = doc.find("\n" + heading);
  EXPECT_NE(at, std::string::npos) << heading;
  if (at == std::string::npos) return rows;
  for (int t = 0; t <= nth; ++t) {
    at = doc.find("\n| key |", at + 1);
    if (t < nth) at = doc.find("\n\n", at);
  }
  std::istringstream lines(doc.substr(doc.find('\n', doc.find('\n', at + 1) + 1) + 1));
  for (std::string line; std::getline(lines, line) && line.starts_with("| ");) {
    const std::string first = line.substr(2, line.find(" | ") - 2);
    for (std::size_t b = first.find('`'); b != std::string::npos; b = first.find('`', first.find('`', b + 1) + 1)) {
      rows[first.substr(b + 1, first.find('`', b + 1) - b - 1)] = line;
    }
  }
  return rows;
}

std::set<std::string> keys_of(const Rows& rows) {
  std::set<std::string> out;
  for (const auto& [k, row] : rows) out.insert(k);
  return out;
}

std::set<std::string> keys_of(const nlohmann::ordered_json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}

// Every field of an object (or of an array's objects) named in backticks in the key's row.
void expect_fields_named(const nlohmann::ordered_json& j, const Rows& rows) {
  for (const auto& [key, value] : j.items()) {
    const auto row = rows.find(key);
    if (row == rows.end()) continue;
    const auto& object = value.is_array() && !value.empty() ? value.front() : value;
    if (!object.is_object()) continue;
    for (const auto& [field, v] : object.items()) {
      EXPECT_NE(row->second.find("`" + field + "`"), std::string::npos) << key << "." << field << " is not documented";
    }
  }
}

const std::string kFixture = std::string(MEMSNAP_FIXTURE_DIR) + "/healthy_training.pickle";

TEST(SchemaDoc, AtJsonIsDocumentedFieldByField) {
  const Rows rows = table_after(schema_doc(), "## `memsnap at` and `memsnap blocks`");
  for (const char* moment : {"--peak", "--step 2 --group-by stack --frame-depth 3", ""}) {
    const test::CliRun r = test::run_memsnap("at " + kFixture + " " + moment + " --format json");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::ordered_json::parse(r.out);
    EXPECT_EQ(keys_of(j), keys_of(rows)) << moment;
    expect_fields_named(j, rows);
    EXPECT_EQ(j["schema"], "memsnap.at/1");
  }
}

TEST(SchemaDoc, BlocksLinesAreDocumentedFieldByField) {
  const Rows rows = table_after(schema_doc(), "## `memsnap at` and `memsnap blocks`", 1);
  const test::CliRun r = test::run_memsnap("blocks " + kFixture + " --peak");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(keys_of(nlohmann::ordered_json::parse(line)), keys_of(rows));
}

TEST(SchemaDoc, RankSummaryAndTopLevelKeysAreDocumented) {
  const std::string doc = schema_doc();
  const test::CliRun r = test::run_memsnap(kFixture + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::ordered_json::parse(r.out);
  const Rows summary = table_after(doc, "### `rank_summary`");
  EXPECT_EQ(keys_of(j["rank_summary"]), keys_of(summary));
  expect_fields_named(j["rank_summary"], summary);
  const Rows top = table_after(doc, "# memsnap JSON report");
  for (const std::string& key : keys_of(j)) EXPECT_TRUE(top.count(key)) << key << " is not in the report table";
}

}  // namespace schema_doc_tests
}  // namespace memsnap
