#include "text/pretokenize.h"

#include "text/char_class.h"
#include "text/utf8.h"

namespace fp8lm::text {
namespace {

struct Scanner {
  std::string_view s;
  // A byte that does not start well-formed UTF-8 is a character of class Other.
  CharClass class_at(size_t i) const {
    const CodePoint c = next_code_point(s, i);
    return c.valid ? char_class(c.value) : CharClass::Other;
  }
  size_t next(size_t i) const { return i + next_code_point(s, i).length; }
  // The end of the run of class k that starts at i.
  size_t run_end(size_t i, CharClass k) const {
    while (i < s.size() && class_at(i) == k) i = next(i);
    return i;
  }
  // 's 't 'm 'd 're 've 'll (lower case only, as GPT-2's pattern): the contraction's length.
  size_t contraction(size_t i) const {
    if (s[i] != '\'' || i + 1 >= s.size()) return 0;
    const char a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= s.size()) return 0;
    const char b = s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }
};

}  // namespace

void split_gpt2(std::string_view text, std::vector<std::string_view>& out) {
  const Scanner sc{text};
  size_t i = 0;
  while (i < text.size()) {
    size_t end = i + sc.contraction(i);
    if (end == i) {
      const CharClass here = sc.class_at(i);
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space (U+0020 only) and a
      // run of one class.
      if (text[i] == ' ' && i + 1 < text.size() && sc.class_at(i + 1) != CharClass::Space) {
        end = sc.run_end(i + 1, sc.class_at(i + 1));
      } else if (here != CharClass::Space) {
        end = sc.run_end(i, here);
      } else {
        // `\s+(?!\S)` then `\s+`: a run of white space up to the end of the text is one
        // piece; one followed by something else leaves its last character to start the next
        // piece, unless it is a single character, which `\s+` takes alone.
        end = sc.run_end(i, CharClass::Space);
        if (end < text.size()) {
          size_t last = i;  // the start of the run's last character
          for (size_t k = i; k < end; k = sc.next(k)) last = k;
          if (last > i) end = last;
        }
      }
    }
    out.push_back(text.substr(i, end - i));
    i = end;
  }
}

}  // namespace fp8lm::text
