#include "tokenizer/flat_maps.h"

#include "common/error.h"

namespace probekit::tokenizer {
namespace {

// Capacity for `count` entries at a load factor of at most 1/2.
size_t capacity_for(size_t count) {
  size_t capacity = 16;
  while (capacity < count * 2) capacity *= 2;
  return capacity;
}

// Grows an open-addressing table to hold `count` entries: every occupied slot is placed again by linear
// probing from its home position in the larger table.
template <typename Slot, typename IsOccupied, typename Home>
void grow_table(std::vector<Slot>& slots, size_t& mask, size_t count, IsOccupied occupied, Home home) {
  if (capacity_for(count) <= slots.size()) return;
  std::vector<Slot> old;
  old.swap(slots);
  slots.assign(capacity_for(count), Slot{});
  mask = slots.size() - 1;
  for (const Slot& slot : old) {
    if (!occupied(slot)) continue;
    size_t i = home(slot) & mask;
    while (occupied(slots[i])) i = (i + 1) & mask;
    slots[i] = slot;
  }
}

}  // namespace

void StringIdMap::reserve(size_t count) {
  grow_table(slots_, mask_, count, [](const Slot& slot) { return slot.id >= 0; },
             [this](const Slot& slot) { return hash_bytes(arena_.data() + slot.offset, slot.size); });
}

void StringIdMap::grow() {
  if ((count_ + 1) * 2 > slots_.size()) reserve(count_ + 1);
}

void StringIdMap::set(std::string_view key, int32_t id, uint64_t h) {
  if (id < 0) fail("negative token id {} for \"{}\"", id, key);
  grow();
  uint32_t tag = static_cast<uint32_t>(h);
  size_t i = h & mask_;
  for (; slots_[i].id >= 0; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.tag == tag && slot.size == key.size() && std::memcmp(arena_.data() + slot.offset, key.data(), key.size()) == 0) {
      slot.id = id;
      return;
    }
  }
  if (arena_.size() + key.size() > UINT32_MAX) fail("vocabulary too large ({} bytes of token strings)", arena_.size());
  slots_[i] = Slot{tag, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
  arena_.append(key);
  count_++;
}

void PairMap::reserve(size_t count) {
  grow_table(slots_, mask_, count, [](const Slot& slot) { return slot.key != kEmpty; },
             [this](const Slot& slot) { return slot_of(slot.key); });
}

void PairMap::set(int32_t left, int32_t right, MergeTarget target) {
  if ((count_ + 1) * 2 > slots_.size()) reserve(count_ + 1);
  uint64_t key = pack(left, right);
  size_t i = slot_of(key);
  for (; slots_[i].key != kEmpty; i = (i + 1) & mask_) {
    if (slots_[i].key == key) {
      slots_[i].target = target;
      return;
    }
  }
  slots_[i] = Slot{key, target};
  count_++;
}

}  // namespace probekit::tokenizer
