// Anchor for bench/tiktoken_anchor.sh: OpenAI's tiktoken (its native Rust CoreBPE, one thread) over the fortunes
// documents cairn-reshard-bench-tokenizer reads (split at "%" lines), printing MB/s.
// usage: tiktoken-anchor RANKS.tiktoken PATTERN_FILE SECONDS FILE...   (RANKS: "base64 rank" lines)
use std::time::Instant;

fn base64_decode(s: &str) -> Vec<u8> {
    let digit = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("ranks file: not base64: {s}"),
        }
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for &c in s.trim_end_matches('=').as_bytes() {
        acc = (acc << 6) | digit(c);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: tiktoken-anchor RANKS.tiktoken PATTERN_FILE SECONDS FILE...");
        std::process::exit(2);
    }
    let ranks: Vec<(Vec<u8>, u32)> = std::fs::read_to_string(&args[1])
        .expect("ranks file")
        .lines()
        .map(|l| {
            let (tok, rank) = l.split_once(' ').expect("ranks line: base64 rank");
            (base64_decode(tok), rank.parse().expect("rank"))
        })
        .collect();
    let pattern = std::fs::read_to_string(&args[2]).expect("pattern file");
    let seconds: f64 = args[3].parse().expect("seconds");
    let no_specials: Vec<(String, u32)> = Vec::new();
    let bpe = tiktoken::CoreBPE::new::<_, _, std::iter::Empty<(String, (u32, u32))>>(ranks, no_specials, &pattern)
        .expect("tiktoken CoreBPE");
    // Documents as cairn-reshard build splits them; files that are not UTF-8 are read lossily.
    let mut docs = Vec::new();
    for file in &args[4..] {
        let text = String::from_utf8_lossy(&std::fs::read(file).expect("input file")).to_string();
        let mut doc = String::new();
        for line in text.split('\n') {
            if line == "%" {
                if !doc.is_empty() {
                    docs.push(std::mem::take(&mut doc));
                }
            } else {
                doc.push_str(line);
                doc.push('\n');
            }
        }
        if !doc.is_empty() {
            docs.push(doc);
        }
    }
    let bytes: usize = docs.iter().map(|d| d.len()).sum();
    let start = Instant::now();
    let (mut passes, mut tokens) = (0usize, 0usize);
    while passes == 0 || start.elapsed().as_secs_f64() < seconds {
        for d in &docs {
            tokens += bpe.encode_ordinary(d).len();
        }
        passes += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "tiktoken (native Rust, 1 thread) {}: {} documents, {:.2} MB per pass, {} passes, {:.2} MB/s, {:.3} bytes/token",
        args[1].rsplit('/').next().unwrap_or(&args[1]),
        docs.len(),
        bytes as f64 / 1e6,
        passes,
        (bytes * passes) as f64 / 1e6 / elapsed,
        (bytes * passes) as f64 / tokens as f64
    );
}
