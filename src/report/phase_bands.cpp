// Phase bands for the HTML timeline (phase_bands.h).
#include "report/phase_bands.h"

namespace memsnap {

nlohmann::ordered_json phase_bands_json(const DevicePhases& d, const std::function<nlohmann::ordered_json(std::size_t)>& marker) {
  auto out = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < d.spans.size() && out.size() < kMaxPhaseBands; ++i) {
    const PhaseSpan& sp = d.spans[i];
    if (sp.phase == Phase::Other || sp.end <= sp.first) continue;
    nlohmann::ordered_json b;
    b["phase"] = name_of(sp.phase);
    b["label"] = phase_label(sp);
    b["iteration"] = sp.iteration;
    b["peak"] = d.peak && d.peak->span == i;
    b["from"] = marker(sp.first);
    b["to"] = marker(sp.end - 1);
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace memsnap
