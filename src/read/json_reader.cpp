// JSON snapshots through simdjson's DOM parser, converted into the shared value arena.
#include "read/json_reader.h"

#include <fmt/format.h>
#include <simdjson.h>

#include "base/error.h"
#include "base/limits.h"

namespace memsnap {

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
      case T::BOOL: return Value::boolean(e.get_bool().value_unsafe());
      case T::INT64: return Value::integer(e.get_int64().value_unsafe());
      case T::UINT64: return Value::uinteger(e.get_uint64().value_unsafe());
      case T::DOUBLE: return Value::real(e.get_double().value_unsafe());
      case T::STRING: {
        std::string_view s = e.get_string().value_unsafe();
        return Value::string(s.data(), static_cast<std::uint32_t>(s.size()));
      }
      case T::ARRAY: {
        Value list = doc->new_container(Kind::List);
        for (simdjson::dom::element item : e.get_array().value_unsafe()) {
          Value v = convert(item, depth + 1);
          doc->append(list, &v, 1);
        }
        return list;
      }
      case T::OBJECT: {
        Value dict = doc->new_container(Kind::Dict);
        for (auto field : e.get_object().value_unsafe()) {
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
    for (simdjson::dom::element per_device : e.get_array().value_unsafe()) {
      Value inner = doc->new_container(Kind::List);
      doc->append(outer, &inner, 1);
      if (per_device.is_array()) {
        for (simdjson::dom::element entry : per_device.get_array().value_unsafe()) {
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
  simdjson::padded_string padded(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  simdjson::dom::element root;
  const auto err = impl_->parser.parse(padded).get(root);
  if (err) {
    throw InputError(fmt::format("the JSON is malformed ({})", simdjson::error_message(err)), kRecaptureRemedy);
  }
  doc.root = impl_->convert(root, 0);
}

}  // namespace memsnap
