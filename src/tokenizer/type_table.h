// Each stage's factory (make_normalizer, make_pre_tokenizer, ...) builds a component from its tokenizer.json
// node through one table of {"type", builder} rows, so the types it dispatches on and the types its errors
// list come from the same place and cannot drift apart.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_node.h"

namespace probekit::tokenizer {

/// One row of a stage's table: the "type" a node names and the function that builds it. A null `build`
/// marks a type the crate has and this port does not build yet.
template <typename Component>
struct TypeRow {
  std::string_view type;
  std::unique_ptr<Component> (*build)(const JsonNode& node);
};

/// The builder of a component that reads nothing from its node.
template <typename Component, typename Concrete>
std::unique_ptr<Component> build_plain(const JsonNode&) {
  return std::make_unique<Concrete>();
}

/// Builds every element of an array node with `make`: the steps of a Sequence.
template <typename Component>
std::vector<std::unique_ptr<Component>> build_each(const JsonNode& array,
                                                   std::unique_ptr<Component> (*make)(const JsonNode&)) {
  std::vector<std::unique_ptr<Component>> components;
  for (const JsonNode& item : array.items()) components.push_back(make(item));
  return components;
}

/// Builds `node` with the row its "type" names. A missing or unknown type fails listing the types the table
/// builds; a type without a builder fails with `not_yet_supported`, a format given the type ({0}) and that
/// list ({1}).
template <typename Component, size_t N>
std::unique_ptr<Component> build_from_table(const JsonNode& node, const TypeRow<Component> (&table)[N],
                                            std::string_view not_yet_supported = {}) {
  std::string supported;
  for (const TypeRow<Component>& row : table) {
    if (row.build == nullptr) continue;
    if (!supported.empty()) supported += ", ";
    supported += row.type;
  }
  std::string type = node.type(supported);
  for (const TypeRow<Component>& row : table) {
    if (row.type != type) continue;
    if (row.build == nullptr) node.fail("{}", fmt::format(fmt::runtime(not_yet_supported), type, supported));
    return row.build(node);
  }
  node.fail("unknown type \"{}\" (supported: {})", type, supported);
}

}  // namespace probekit::tokenizer
