#!/usr/bin/env python3
"""Checks that a PNG screenshot is not blank (Pillow, Debian python3-pil).

  png_check.py SHOT.png [--min-colors N] [--min-nonwhite FRACTION] [--crop Y0 Y1 OUT.png]

Prints size, distinct colours and the fraction of non-white pixels; exits 1 if below the minimums.
--crop writes rows Y0..Y1 to OUT.png (for looking at parts of a tall screenshot).
"""
import argparse
import sys

from PIL import Image


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("png")
    ap.add_argument("--min-colors", type=int, default=50)
    ap.add_argument("--min-nonwhite", type=float, default=0.02)
    ap.add_argument("--crop", nargs=3, metavar=("Y0", "Y1", "OUT"))
    a = ap.parse_args()
    im = Image.open(a.png).convert("RGB")
    w, h = im.size
    colors = im.getcolors(maxcolors=1 << 24)
    ncolors = len(colors)
    nonwhite = sum(n for n, c in colors if min(c) < 245) / float(w * h)
    print("png %dx%d, %d distinct colours, %.1f%% non-white" % (w, h, ncolors, nonwhite * 100))
    if a.crop:
        im.crop((0, int(a.crop[0]), w, int(a.crop[1]))).save(a.crop[2])
    if ncolors < a.min_colors or nonwhite < a.min_nonwhite:
        print("screenshot looks blank (need >= %d colours and >= %.1f%% non-white)" %
              (a.min_colors, a.min_nonwhite * 100), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
