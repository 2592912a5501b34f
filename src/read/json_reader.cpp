// JSON snapshots through simdjson's DOM parser, converted into the shared value arena.
#include "read/json_reader.h"

#include <fmt/format.h>
#include <simdjson.h>

#include "base/error.h"
#include "base/limits.h"

namespace memsnap {
namespace {

// Reads a typed value out of a simdjson result; the type was checked by the caller.
template <typename Result, typename T>
void take(Result&& result, T& out) {
  if (std::forward<Result>(result).get(out)) throw InputError("the JSON holds a value of an unexpected type", kRecaptureRemedy);
}

}  // namespace

struct JsonReader::Impl {
  simdjson::dom::parser parser;
  Document* doc = nullptr;
  TraceEntrySink* sink = nullptr;

  Value convert(simdjson::dom::element e, std::size_t depth) {
    if (depth > limits::kMaxNestingDepth) {
      throw InputError(fmt::format("JSON nesting deeper than memsnap's limit of {}", limits::kMaxNestingDepth), kRecaptureRemedy);
    }
    using T = simdjson::dom::element_type;
    switch (e.type()) {
      case T::NULL_VALUE: return Value::none();
      case T::BOOL: { bool b = false; take(e.get_bool(), b); return Value::boolean(b); }
      case T::INT64: { std::int64_t x = 0; take(e.get_int64(), x); return Value::integer(x); }
      case T::UINT64: { std::uint64_t x = 0; take(e.get_uint64(), x); return Value::uinteger(x); }
      case T::DOUBLE: { double x = 0; take(e.get_double(), x); return Value::real(x); }
      case T::STRING: {
        std::string_view s;
        take(e.get_string(), s);
        return Value::string(s.data(), static_cast<std::uint32_t>(s.size()));
      }
      case T::ARRAY: {
        Value list = doc->new_container(Kind::List);
        simdjson::dom::array array;
        take(e.get_array(), array);
        for (simdjson::dom::element item : array) {
          Value v = convert(item, depth + 1);
          doc->append(list, &v, 1);
        }
        return list;
      }
      case T::OBJECT: {
        Value dict = doc->new_container(Kind::Dict);
        simdjson::dom::object object;
        take(e.get_object(), object);
        for (auto field : object) {
          Value kv[2] = {Value::string(field.key.data(), static_cast<std::uint32_t>(field.key.size())),
                         depth == 0 && field.key == "device_traces" && sink ? stream_traces(field.value)
                                                                          : convert(field.value, depth + 1)};
          doc->append(dict, kv, 2);
        }
        return dict;
      }
    }
    return Value::none();
  }

  // device_traces: entries go to the sink one at a time and are dropped from the arena at once.
  Value stream_traces(simdjson::dom::element e) {
    if (!e.is_array()) return convert(e, 1);
    Value outer = doc->new_container(Kind::List);
    std::size_t device = 0;
    simdjson::dom::array devices;
    take(e.get_array(), devices);
    for (simdjson::dom::element per_device : devices) {
      Value inner = doc->new_container(Kind::List);
      doc->append(outer, &inner, 1);
      if (per_device.is_array()) {
        simdjson::dom::array entries;
        take(per_device.get_array(), entries);
        for (simdjson::dom::element entry : entries) {
          const Document::Mark mark = doc->mark();
          Value v = convert(entry, 3);
          sink->trace_entry(device, v, *doc);
          sink->released(mark.containers);
          doc->release_to(mark);
        }
      } else {
        Value v = convert(per_device, 2);
        doc->append(outer, &v, 1);  // not a list: let the builder report it
      }
      ++device;
    }
    return outer;
  }
};

JsonReader::JsonReader() : impl_(std::make_unique<Impl>()) {}
JsonReader::~JsonReader() = default;

void JsonReader::read(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink) {
  impl_->doc = &doc;
  impl_->sink = sink;
  // A UTF-8 byte order mark (editors on Windows write one) is not part of the JSON.
  if (bytes.size() >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF) bytes = bytes.subspan(3);
  simdjson::padded_string padded(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  simdjson::dom::element root;
  const auto err = impl_->parser.parse(padded).get(root);
  if (err) {
    throw InputError(fmt::format("the JSON is malformed ({})", simdjson::error_message(err)), kRecaptureRemedy);
  }
  doc.root = impl_->convert(root, 0);
}

}  // namespace memsnap
