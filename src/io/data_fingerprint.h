#pragma once
// What a run was trained on, recorded at its start (config.json, every checkpoint) so that a
// resume notices data that changed under it: a text file replaced or edited, a dataset prepared
// again with another tokenizer. Cheap whatever the data's size (the ends of a file, not all of
// it): taken once per start, never per step.
//   text file:     {"path", "size", "mtime_ns", "xxh3_ends"}: its size, modification time and
//                  the XXH3-64 of its first and last MiB
//   token dataset: {"path", "manifest_xxh3", "tokenizer_xxh3"}: its manifest.json (every
//                  shard's name and token count, the vocabulary) and its tokenizer, whole; a
//                  dataset prepared again alike is the same data
#include <nlohmann/json.hpp>
#include <string>

namespace fp8lm {

// The fingerprint of the data at path; null for "" (the stride task, no data). Error naming the
// path when it cannot be read.
nlohmann::json data_fingerprint(const std::string& path);

// What differs between a recorded fingerprint and the data's now, as text ("size 1200 -> 4096
// bytes, modification time"); empty when nothing does.
std::string data_changes(const nlohmann::json& recorded, const nlohmann::json& now);

}  // namespace fp8lm
