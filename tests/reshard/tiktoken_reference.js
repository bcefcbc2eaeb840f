// node tiktoken_reference.js PKG DELIM FILE...: GPT-2 token ids by OpenAI's tiktoken (encode_ordinary: no special
// tokens), one line per document; documents are the texts between lines equal to DELIM, newlines included, as
// cairn-reshard build --delimiter DELIM reads them (empty ones skipped).
const fs = require('fs');
const [pkg, delim, ...files] = process.argv.slice(2);
const enc = require(pkg).get_encoding('gpt2');
const out = [];
for (const f of files) {
  let doc = '';
  const flush = () => { if (doc.length) out.push(Array.from(enc.encode_ordinary(doc)).join(' ')); doc = ''; };
  const text = fs.readFileSync(f, 'utf-8');
  for (const line of text.match(/[^\n]*\n|[^\n]+$/g) || []) {
    let bare = line.endsWith('\n') ? line.slice(0, -1) : line;
    if (bare.endsWith('\r')) bare = bare.slice(0, -1);
    if (bare === delim) flush(); else doc += line;
  }
  flush();
}
enc.free();
process.stdout.write(out.map((x) => x + '\n').join(''));
