// Reference GPT-2 tokenization with the npm package gpt-3-encoder: splits fortune files into
// documents exactly as `cairn-reshard build --delimiter %` does and prints one line of ids per document.
// usage: node gpt2_reference.js PACKAGE_DIR FILE...
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2]));
const out = [];
for (const file of process.argv.slice(3)) {
  const text = fs.readFileSync(file, 'utf-8');
  // Lines keep their "\n"; a line equal to "%" (ignoring a trailing "\r") ends a document.
  const lines = text.match(/[^\n]*\n|[^\n]+$/g) || [];
  let doc = '';
  const flush = () => { if (doc.length > 0) out.push(encode(doc).join(' ')); doc = ''; };
  for (const line of lines) {
    let bare = line.endsWith('\n') ? line.slice(0, -1) : line;
    if (bare.endsWith('\r')) bare = bare.slice(0, -1);
    if (bare === '%') flush(); else doc += line;
  }
  flush();
}
process.stdout.write(out.map(l => l + '\n').join(''));
