// Reading per-rank JSON reports back into rank results, and comparing them.
#include "query/merge.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <optional>

#include "base/error.h"

namespace memsnap {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

Category category_from(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(Category::Unknown); ++c) {
    if (name == category_name(static_cast<Category>(c))) return static_cast<Category>(c);
  }
  return Category::Unknown;
}

FrameKind frame_kind_from(const std::string& name) {
  for (int k = 0; k <= static_cast<int>(FrameKind::Generated); ++k) {
    if (name == frame_kind_name(static_cast<FrameKind>(k))) return static_cast<FrameKind>(k);
  }
  return FrameKind::Native;
}

std::optional<std::int64_t> optional_int(const Json& v) {
  return v.is_number() ? std::optional<std::int64_t>(v.get<std::int64_t>()) : std::nullopt;
}

Totals totals_from(const Json& j) {
  Totals t;
  t.reserved = j.at("reserved").get<std::uint64_t>();
  t.allocated = j.at("allocated").get<std::uint64_t>();
  t.pending_free = j.at("pending_free").get<std::uint64_t>();
  t.inactive = j.at("inactive").get<std::uint64_t>();
  t.requested = j.at("requested").get<std::uint64_t>();
  t.segments = j.at("segments").get<std::uint64_t>();
  t.blocks = j.at("blocks").get<std::uint64_t>();
  t.largest_inactive_block = j.at("largest_inactive_block").get<std::uint64_t>();
  t.inactive_in_free_segments = j.value("inactive_in_free_segments", std::uint64_t{0});
  t.free_segments = j.value("free_segments", std::uint64_t{0});
  t.largest_fragment = j.value("largest_fragment", std::uint64_t{0});
  t.peak_allocated = optional_int(j.at("peak_allocated"));
  t.peak_reserved = optional_int(j.at("peak_reserved"));
  const std::string certainty = j.value("peak_certainty", std::string(peak_certainty_name(PeakCertainty::InWindow)));
  for (PeakCertainty c : {PeakCertainty::InWindow, PeakCertainty::AtWindowStart, PeakCertainty::TooShort}) {
    if (certainty == peak_certainty_name(c)) t.peak_certainty = c;
  }
  t.reserved_peak_at_window_start = j.value("reserved_peak_at_window_start", false);
  return t;
}

// A site as json_report's site_json wrote it.
Site site_from(const Json& j) {
  Site s;
  s.site = j.at("site").get<std::string>();
  s.file = j.at("file").get<std::string>();
  s.line = j.at("line").get<std::int64_t>();
  s.function = j.at("function").get<std::string>();
  s.device = j.contains("device") && j["device"].is_number_integer() ? j["device"].get<std::int64_t>() : -1;
  s.bytes = j.at("bytes").get<std::uint64_t>();
  s.requested = j.at("requested").get<std::uint64_t>();
  s.blocks = j.at("blocks").get<std::uint64_t>();
  s.percent = j.at("percent").get<double>();
  s.category = category_from(j.at("category").get<std::string>());
  const std::string kind = j.at("frame_kind").get<std::string>();
  s.no_stack = kind == "none";
  s.kind = frame_kind_from(kind);
  s.call_path = j.at("stack").get<std::vector<std::string>>();
  s.what = j.value("what", "");
  s.what_frame = j.value("what_frame", "");
  s.what_op = j.value("what_op", "");
  if (j.contains("known_allocator") && j["known_allocator"].is_object()) {
    s.known = find_known_allocator(j["known_allocator"].value("id", ""));
  }
  s.full_stack = j.value("full_stack", std::vector<std::string>{});
  if (const auto p = j.find("provenance"); p != j.end() && p->is_object()) {
    for (std::size_t i = 0; i < kProvenanceCount; ++i) {
      s.bytes_by_provenance[i] = p->value(std::string(name_of(static_cast<Provenance>(i))), std::uint64_t{0});
    }
  }
  return s;
}

// A site of rank_summary's compact lists: [site, file, line, function, category, bytes, blocks, device]
// (reports before the device have 7 elements).
Site compact_site_from(const Json& j) {
  Site s;
  s.site = j.at(0).get<std::string>();
  s.file = j.at(1).get<std::string>();
  s.line = j.at(2).get<std::int64_t>();
  s.function = j.at(3).get<std::string>();
  s.category = category_from(j.at(4).get<std::string>());
  s.bytes = j.at(5).get<std::uint64_t>();
  s.blocks = j.at(6).get<std::uint64_t>();
  s.device = j.size() > 7 && j.at(7).is_number_integer() ? j.at(7).get<std::int64_t>() : -1;
  s.no_stack = s.site == "[no stack recorded]";
  return s;
}

std::vector<Site> sites_from(const Json& top, const Json& more) {
  std::vector<Site> out;
  for (const Json& s : top) out.push_back(site_from(s));
  for (const Json& s : more) out.push_back(compact_site_from(s));
  return out;
}

// An enum field by its name; a name this memsnap does not know makes the report unusable.
template <class E>
E enum_field(const Json& j, const char* key) {
  const auto name = j.at(key).get<std::string>();
  if (const auto value = enum_from_name<E>(name)) return *value;
  throw InputError(fmt::format("the report's {} '{}' is unknown to this memsnap", key, name), "merge reports written by the same memsnap version");
}

// A pattern read back from a report: its prose stays as written.
Pattern pattern_from(const Json& j) {
  Pattern p;
  p.id = enum_field<PatternId>(j, "id");
  p.verdict = enum_field<Verdict>(j, "verdict");
  p.confidence = enum_field<Confidence>(j, "confidence");
  p.summary = verbatim(j.at("summary").get<std::string>());
  for (auto& e : j.at("evidence").get<std::vector<std::string>>()) p.evidence.push_back(verbatim(std::move(e)));
  p.sites = j.at("sites").get<std::vector<std::string>>();
  for (auto& f : j.at("fix").get<std::vector<std::string>>()) p.fix.push_back(fix(FixId::FromReport, std::move(f)));
  if (j.contains("saving_bytes") && !j.at("saving_bytes").is_null()) p.saving_bytes = j.at("saving_bytes").get<std::uint64_t>();
  return p;
}

ModelState model_from(const Json& j) {
  ModelState m;
  m.parameters = j.at("parameters").get<std::uint64_t>();
  m.gradients = j.at("gradients").get<std::uint64_t>();
  m.optimizer_state = j.at("optimizer_state").get<std::uint64_t>();
  m.ddp_buckets = j.at("ddp_buckets").get<std::uint64_t>();
  m.live = j.at("live").get<std::uint64_t>();
  m.ddp_frames = j.at("ddp_frames").get<bool>();
  m.sharded_frames = j.at("sharded_frames").get<bool>();
  return m;
}

// The report's rank result, or the reason it cannot be used.
std::optional<RankResult> rank_from(const Json& j, std::string& error) {
  if (!j.is_object() || j.value("schema", "") != "memsnap.report/1") {
    error = "not a memsnap.report/1 JSON report";
    return std::nullopt;
  }
  if (j.contains("ranks")) {
    error = "a report of several ranks (memsnap DIR); merge the per-rank reports instead";
    return std::nullopt;
  }
  if (!j.contains("rank_summary")) {
    error = "the report has no rank_summary (written by an older memsnap); re-run memsnap on the snapshot";
    return std::nullopt;
  }
  RankResult r;
  r.path = j.at("input").at("path").get<std::string>();
  r.input.path = r.path;
  r.analysis.totals.overall = totals_from(j.at("totals"));
  const Json& summary = j.at("rank_summary");
  r.analysis.sites = sites_from(j.at("top_sites"), summary.at("more_sites"));
  r.analysis.sites_at_peak = sites_from(j.at("peak").at("top_sites"), summary.at("more_sites_at_peak"));
  for (const Json& p : j.at("patterns")) r.analysis.patterns.push_back(pattern_from(p));
  r.analysis.headline = j.at("headline").get<std::string>();
  r.oom_events = j.at("trace").at("oom").size();
  r.model = model_from(summary.at("model_state"));
  return r;
}

}  // namespace

std::vector<std::string> report_files(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      out.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(p, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.empty() && name[0] != '.' && name.ends_with(".json") && entry.is_regular_file(ec)) found.push_back(entry.path().string());
    }
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

MergedRanks merge_reports(const std::vector<std::string>& files) {
  if (files.empty()) throw InputError("no report files", "name the per-rank JSON reports or a directory holding them");
  std::vector<Json> reports(files.size());
  std::vector<std::optional<RankResult>> results(files.size());
  std::vector<std::string> errors(files.size()), names(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    names[i] = files[i];
    std::ifstream in(files[i], std::ios::binary);
    if (!in) {
      errors[i] = "cannot open the file";
      continue;
    }
    reports[i] = Json::parse(in, nullptr, false);
    if (reports[i].is_discarded()) {
      errors[i] = "not JSON";
      continue;
    }
    try {
      results[i] = rank_from(reports[i], errors[i]);
    } catch (const Json::exception& e) {
      errors[i] = fmt::format("a field of the report is missing or of the wrong type ({})", e.what());
    } catch (const InputError& e) {
      errors[i] = e.problem();
    }
    if (results[i]) names[i] = results[i]->path;  // ranks are numbered from the snapshots' names
  }
  for (std::size_t i = 0; i < files.size() && !results[i]; ++i) {
    if (i + 1 == files.size()) {
      throw InputError(fmt::format("none of the {} reports can be merged (first: {}: {})", files.size(),
                                   fs::path(files.front()).filename().string(), errors.front()),
                       "pass the JSON reports written by `memsnap rankN.pickle --format json`");
    }
  }
  std::string directory;
  for (const auto& r : results) {
    if (r) {
      directory = fs::path(r->path).parent_path().string();
      break;
    }
  }
  MergedRanks out;
  out.ranks = compare_ranks(directory, names, std::move(results), errors);
  const std::string& body_path = out.ranks.ranks[out.ranks.body].path;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (reports[i].is_object() && reports[i].contains("input") && reports[i]["input"].value("path", "") == body_path) {
      out.body = std::move(reports[i]);
      break;
    }
  }
  return out;
}

}  // namespace memsnap
