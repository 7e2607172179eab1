#include "activations/readout_recipe.h"

#include <fmt/format.h>

#include "common/error.h"

namespace probekit::activations {

namespace {

enum class FieldType { kText, kInteger, kJson };

// One field of the recipe: its name in both codecs and in messages, how it is stored, whether rows depend on it,
// and its text form both ways (what the codecs and the identity are made of). A new field is one row here.
struct RecipeField {
  const char* name;
  FieldType type;
  bool shapes_rows;         // recipe_difference compares it
  bool omitted_when_empty;  // left out of HDF5 attributes when empty, as files always had it
  std::string (*text)(const ReadoutRecipe&);
  void (*set)(ReadoutRecipe&, const std::string& text, const std::string& where);
};

Site site_of(const std::string& name, const std::string& where) {
  std::optional<Site> site = find_site(name);
  if (!site) fail_input("{}: 'site' is '{}', not a site (expected one of {})", where, name, site_names());
  return *site;
}

Position position_of(const std::string& name, const std::string& where) {
  std::optional<Position> position = find_position(name);
  if (!position) fail_input("{}: 'position' is '{}', expected last, mean, max or all", where, name);
  return *position;
}

TokenMask mask_of(const std::string& name, const std::string& where) {
  std::optional<TokenMask> mask = find_token_mask(name);
  if (!mask) fail_input("{}: 'mask' is '{}', expected assistant, user, last-assistant or all", where, name);
  return *mask;
}

bool flag_of(const std::string& text, const char* name, const std::string& where) {
  if (text != "true" && text != "false" && !text.empty()) fail_input("{}: '{}' is '{}', expected true or false", where, name, text);
  return text == "true";
}

int64_t count_of(const std::string& text, const char* field, const std::string& where) {
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 0) fail_input("{}: '{}' is {}, expected a non-negative integer", where, field, text);
  return value;
}

Json json_object_of(const std::string& text, const char* name, const std::string& where) {
  Json value = Json::parse(text, nullptr, false);
  if (!value.is_object()) fail_input("{}: '{}' is not a JSON object: {}", where, name, text.substr(0, 80));
  return value;
}

Json steering_of(const std::string& text, const std::string& where) {
  return text.empty() ? Json() : json_object_of(text, "steering", where);
}

const std::vector<RecipeField>& recipe_fields() {
  using R = ReadoutRecipe;
  using W = const std::string&;
  static const std::vector<RecipeField> fields = {
      {"model_name", FieldType::kText, false, false, [](const R& r) { return r.model_name; },
       [](R& r, W text, W) { r.model_name = text; }},
      {"model_revision", FieldType::kText, false, true, [](const R& r) { return r.model_revision; },
       [](R& r, W text, W) { r.model_revision = text; }},
      {"model_fingerprint", FieldType::kText, true, false, [](const R& r) { return r.model_fingerprint; },
       [](R& r, W text, W) { r.model_fingerprint = text; }},
      {"site", FieldType::kText, true, false, [](const R& r) { return std::string(site_name(r.site)); },
       [](R& r, W text, W where) { r.site = site_of(text, where); }},
      {"position", FieldType::kText, true, false, [](const R& r) { return position_name(r.position); },
       [](R& r, W text, W where) { r.position = position_of(text, where); }},
      {"prompt_suffix", FieldType::kText, true, false, [](const R& r) { return r.prompt_suffix; },
       [](R& r, W text, W) { r.prompt_suffix = text; }},
      {"max_length", FieldType::kInteger, true, false, [](const R& r) { return std::to_string(r.max_length); },
       [](R& r, W text, W where) { r.max_length = count_of(text, "max_length", where); }},
      {"dtype", FieldType::kText, false, false, [](const R& r) { return r.dtype; },
       [](R& r, W text, W) { r.dtype = text; }},
      {"mask", FieldType::kText, true, true, [](const R& r) { return r.mask ? token_mask_name(*r.mask) : std::string(); },
       [](R& r, W text, W where) { r.mask = text.empty() ? std::nullopt : std::optional<TokenMask>(mask_of(text, where)); }},
      {"chat_template_sha256", FieldType::kText, true, true, [](const R& r) { return r.chat_template_sha256; },
       [](R& r, W text, W) { r.chat_template_sha256 = text; }},
      {"add_generation_prompt", FieldType::kText, true, true,
       [](const R& r) { return r.add_generation_prompt ? std::string("true") : std::string(); },
       [](R& r, W text, W where) { r.add_generation_prompt = flag_of(text, "add_generation_prompt", where); }},
      {"steering", FieldType::kJson, true, true,
       [](const R& r) { return r.steering.is_null() ? std::string() : r.steering.dump(); },
       [](R& r, W text, W where) { r.steering = steering_of(text, where); }},
      {"leading_specials", FieldType::kInteger, false, true,
       [](const R& r) { return r.leading_specials ? std::to_string(*r.leading_specials) : std::string(); },
       [](R& r, W text, W where) {
         r.leading_specials = text.empty() ? std::nullopt : std::optional<int64_t>(count_of(text, "leading_specials", where));
       }},
      {"sae", FieldType::kJson, true, true, [](const R& r) { return r.sae ? r.sae->to_json().dump() : std::string(); },
       [](R& r, W text, W where) {
         r.sae = text.empty() ? std::nullopt
                              : std::optional<SaeReading>(SaeReading::from_json(json_object_of(text, "sae", where), where));
       }},
  };
  return fields;
}

// A field's value in JSON, as its row's type stores it.
std::string json_text(const RecipeField& field, const Json& value, const std::string& where) {
  switch (field.type) {
    case FieldType::kText:
      if (!value.is_string()) fail_input("{}: '{}' must be a string, got {}", where, field.name, value.dump());
      return value.get<std::string>();
    case FieldType::kInteger:
      if (value.is_null() && field.omitted_when_empty) return "";
      if (!value.is_number_integer()) fail_input("{}: '{}' must be an integer, got {}", where, field.name, value.dump());
      return std::to_string(value.get<int64_t>());
    case FieldType::kJson:
      if (!value.is_null() && !value.is_object()) {
        fail_input("{}: '{}' must be an object or null, got {}", where, field.name, value.dump());
      }
      return value.is_null() ? std::string() : value.dump();
  }
  return "";
}

// A value for messages: text quoted as JSON quotes it (a suffix's newlines stay visible), "none" when empty.
std::string shown(const RecipeField& field, const std::string& text) {
  if (text.empty()) return "none";
  return field.type == FieldType::kText ? dump_json(Json(text)) : text;
}

}  // namespace

int64_t SaeReading::latent_count() const {
  return dictionary.contains("d_sae") && dictionary["d_sae"].is_number_integer() ? dictionary["d_sae"].get<int64_t>() : 0;
}

Json SaeReading::to_json() const { return {{"site", site.text()}, {"top_k", top_k}, {"dictionary", dictionary}}; }

SaeReading SaeReading::from_json(const Json& object, const std::string& where) {
  SaeReading reading;
  const Json site = object.value("site", Json());
  std::optional<SaeSite> parsed = site.is_string() ? parse_sae_site(site.get<std::string>()) : std::nullopt;
  if (!parsed) fail_input("{}: 'sae.site' is {}, expected \"sae:NAME\" or \"sae-error:NAME\"", where, site.dump());
  reading.site = *parsed;
  const Json top_k = object.value("top_k", Json(0));
  if (!top_k.is_number_integer() || top_k.get<int64_t>() < 0) {
    fail_input("{}: 'sae.top_k' is {}, expected a non-negative integer", where, top_k.dump());
  }
  reading.top_k = top_k.get<int64_t>();
  reading.dictionary = object.value("dictionary", Json::object());
  if (!reading.dictionary.is_object() || reading.latent_count() <= 0) {
    fail_input("{}: 'sae.dictionary' has no positive integer 'd_sae'", where);
  }
  return reading;
}

std::string ReadoutRecipe::site_text() const { return sae ? sae->site.text() : std::string(site_name(site)); }

Json ReadoutRecipe::to_json() const {
  Json out = Json::object();
  for (const RecipeField& field : recipe_fields()) {
    const std::string text = field.text(*this);
    switch (field.type) {
      case FieldType::kText: out[field.name] = text; break;
      case FieldType::kInteger: out[field.name] = text.empty() ? Json() : Json(std::stoll(text)); break;
      case FieldType::kJson: out[field.name] = text.empty() ? Json() : Json::parse(text); break;
    }
  }
  return out;
}

ReadoutRecipe ReadoutRecipe::from_json(const Json& object, const std::string& where) {
  if (!object.is_object()) fail_input("{}: expected an object, got {}", where, object.dump());
  ReadoutRecipe recipe;
  for (const RecipeField& field : recipe_fields()) {
    if (object.contains(field.name)) field.set(recipe, json_text(field, object.at(field.name), where), where);
  }
  return recipe;
}

void ReadoutRecipe::write_attributes(hid_t object) const {
  for (const RecipeField& field : recipe_fields()) {
    const std::string text = field.text(*this);
    if (field.omitted_when_empty && text.empty()) continue;
    if (field.type == FieldType::kInteger) {
      hdf5::set_attribute(object, field.name, std::stoll(text));
    } else {
      hdf5::set_attribute(object, field.name, text);
    }
  }
}

ReadoutRecipe ReadoutRecipe::read_attributes(hid_t object, const std::string& where) {
  ReadoutRecipe recipe;
  for (const RecipeField& field : recipe_fields()) {
    if (field.type == FieldType::kInteger) {
      std::optional<int64_t> value = hdf5::get_int_attribute(object, field.name);
      if (value) field.set(recipe, std::to_string(*value), where);
    } else {
      std::optional<std::string> value = hdf5::get_string_attribute(object, field.name);
      if (value) field.set(recipe, *value, where);
    }
  }
  return recipe;
}

std::vector<std::string> ReadoutRecipe::identity() const {
  std::vector<std::string> lines;
  for (const RecipeField& field : recipe_fields()) lines.push_back(std::string(field.name) + "=" + field.text(*this));
  return lines;
}

std::string recipe_difference(const ReadoutRecipe& a, const ReadoutRecipe& b, const std::string& a_name,
                              const std::string& b_name) {
  for (const RecipeField& field : recipe_fields()) {
    if (!field.shapes_rows) continue;
    const std::string in_a = field.text(a), in_b = field.text(b);
    if (in_a != in_b) return fmt::format("{}: {} in {}, {} in {}", field.name, shown(field, in_a), a_name, shown(field, in_b),
                                           b_name);
  }
  return "";
}

}  // namespace probekit::activations
