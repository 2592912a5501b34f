// The pickle opcodes, as one table: constant, name (as Python's pickletools spells it), byte and
// what memsnap does with it. The VM (pickle_reader.cpp), its fast path (pickle_fast_path.cpp) and
// the error messages all read this table; an opcode memsnap learns to execute changes its use here
// and gets a case in PickleVm::dispatch.
#pragma once

#include <cstdint>

namespace memsnap {

// Data: executed. Refused: it would import, construct or call Python objects (never in a memory
// snapshot). Text: a protocol 0/1 text opcode PyTorch snapshots never contain.
enum class OpUse : std::uint8_t { kData, kRefused, kText };

#define MEMSNAP_PICKLE_OPCODES(X)                       \
  X(kMark, "MARK", '(', kData)                          \
  X(kStop, "STOP", '.', kData)                          \
  X(kPop, "POP", '0', kData)                            \
  X(kPopMark, "POP_MARK", '1', kData)                   \
  X(kDup, "DUP", '2', kData)                            \
  X(kFloat, "FLOAT", 'F', kText)                        \
  X(kInt, "INT", 'I', kText)                            \
  X(kBinInt, "BININT", 'J', kData)                      \
  X(kBinInt1, "BININT1", 'K', kData)                    \
  X(kLong, "LONG", 'L', kText)                          \
  X(kBinInt2, "BININT2", 'M', kData)                    \
  X(kNone, "NONE", 'N', kData)                          \
  X(kPersId, "PERSID", 'P', kRefused)                   \
  X(kBinPersId, "BINPERSID", 'Q', kRefused)             \
  X(kReduce, "REDUCE", 'R', kRefused)                   \
  X(kString, "STRING", 'S', kText)                      \
  X(kBinString, "BINSTRING", 'T', kData)                \
  X(kShortBinString, "SHORT_BINSTRING", 'U', kData)     \
  X(kUnicode, "UNICODE", 'V', kText)                    \
  X(kBinUnicode, "BINUNICODE", 'X', kData)              \
  X(kAppend, "APPEND", 'a', kData)                      \
  X(kBuild, "BUILD", 'b', kRefused)                     \
  X(kGlobal, "GLOBAL", 'c', kRefused)                   \
  X(kDict, "DICT", 'd', kData)                          \
  X(kEmptyDict, "EMPTY_DICT", '}', kData)               \
  X(kAppends, "APPENDS", 'e', kData)                    \
  X(kGet, "GET", 'g', kText)                            \
  X(kBinGet, "BINGET", 'h', kData)                      \
  X(kInst, "INST", 'i', kRefused)                       \
  X(kLongBinGet, "LONG_BINGET", 'j', kData)             \
  X(kList, "LIST", 'l', kData)                          \
  X(kEmptyList, "EMPTY_LIST", ']', kData)               \
  X(kObj, "OBJ", 'o', kRefused)                         \
  X(kPut, "PUT", 'p', kText)                            \
  X(kBinPut, "BINPUT", 'q', kData)                      \
  X(kLongBinPut, "LONG_BINPUT", 'r', kData)             \
  X(kSetItem, "SETITEM", 's', kData)                    \
  X(kTuple, "TUPLE", 't', kData)                        \
  X(kEmptyTuple, "EMPTY_TUPLE", ')', kData)             \
  X(kSetItems, "SETITEMS", 'u', kData)                  \
  X(kBinFloat, "BINFLOAT", 'G', kData)                  \
  X(kProto, "PROTO", 0x80, kData)                       \
  X(kNewObj, "NEWOBJ", 0x81, kRefused)                  \
  X(kExt1, "EXT1", 0x82, kRefused)                      \
  X(kExt2, "EXT2", 0x83, kRefused)                      \
  X(kExt4, "EXT4", 0x84, kRefused)                      \
  X(kTuple1, "TUPLE1", 0x85, kData)                     \
  X(kTuple2, "TUPLE2", 0x86, kData)                     \
  X(kTuple3, "TUPLE3", 0x87, kData)                     \
  X(kNewTrue, "NEWTRUE", 0x88, kData)                   \
  X(kNewFalse, "NEWFALSE", 0x89, kData)                 \
  X(kLong1, "LONG1", 0x8a, kData)                       \
  X(kLong4, "LONG4", 0x8b, kData)                       \
  X(kBinBytes, "BINBYTES", 'B', kData)                  \
  X(kShortBinBytes, "SHORT_BINBYTES", 'C', kData)       \
  X(kShortBinUnicode, "SHORT_BINUNICODE", 0x8c, kData)  \
  X(kBinUnicode8, "BINUNICODE8", 0x8d, kData)           \
  X(kBinBytes8, "BINBYTES8", 0x8e, kData)               \
  X(kEmptySet, "EMPTY_SET", 0x8f, kData)                \
  X(kAddItems, "ADDITEMS", 0x90, kData)                 \
  X(kFrozenSet, "FROZENSET", 0x91, kData)               \
  X(kNewObjEx, "NEWOBJ_EX", 0x92, kRefused)             \
  X(kStackGlobal, "STACK_GLOBAL", 0x93, kRefused)       \
  X(kMemoize, "MEMOIZE", 0x94, kData)                   \
  X(kFrame, "FRAME", 0x95, kData)                       \
  X(kByteArray8, "BYTEARRAY8", 0x96, kData)             \
  X(kNextBuffer, "NEXT_BUFFER", 0x97, kRefused)         \
  X(kReadonlyBuffer, "READONLY_BUFFER", 0x98, kRefused)

// op::kMark == '(' and so on, for switches and byte comparisons.
namespace op {
#define MEMSNAP_OPCODE_CONSTANT(constant, name, byte, use) inline constexpr std::uint8_t constant = byte;
MEMSNAP_PICKLE_OPCODES(MEMSNAP_OPCODE_CONSTANT)
#undef MEMSNAP_OPCODE_CONSTANT
}  // namespace op

struct PickleOpcode {
  std::uint8_t byte;
  const char* name;
  OpUse use;
};

inline constexpr PickleOpcode kPickleOpcodes[] = {
#define MEMSNAP_OPCODE_ROW(constant, name, byte, use) {byte, name, OpUse::use},
    MEMSNAP_PICKLE_OPCODES(MEMSNAP_OPCODE_ROW)
#undef MEMSNAP_OPCODE_ROW
};

// The row of `byte`, or nullptr for a byte that is no pickle opcode.
const PickleOpcode* pickle_opcode(std::uint8_t byte);

}  // namespace memsnap
