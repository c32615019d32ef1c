#!/usr/bin/env python
"""Re-encode the PNG figures stored in notebooks' outputs with an adaptive palette of 256 colours (no dithering) and
PNG's own compression, keeping their size in pixels and their recorded dpi. Matplotlib's plots use few colours, so
the result looks the same and takes a third of the bytes or less; a figure is replaced only if it gets smaller.

  python tools/shrink_figures.py nbs/13_mt_results.ipynb ...   # rewrite these notebooks in place
  python tools/shrink_figures.py --check nbs/*.ipynb           # list notebooks whose outputs exceed 500 KB

`tools/nbrun.py` calls `shrink_notebook` on every notebook whose outputs it saves.
"""
import argparse, base64, io, json, sys
from pathlib import Path

LIMIT = 500_000   # bytes of outputs per notebook, as stored (base64 included)

def shrink_png(b:bytes)->bytes:
    "`b` re-encoded with a 256-colour palette, or `b` itself if that is not smaller"
    from PIL import Image
    im = Image.open(io.BytesIO(b))
    if im.mode == 'P' and 'transparency' not in im.info: return b   # shrunk already: re-encoding only churns bytes
    dpi = im.info.get('dpi')
    if im.mode in ('RGBA', 'LA') or (im.mode == 'P' and 'transparency' in im.info):
        im = im.convert('RGBA')
        white = Image.new('RGBA', im.size, (255, 255, 255, 255))
        im = Image.alpha_composite(white, im)   # what a reader sees on the page's white background
    q = im.convert('RGB').quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    q.save(out, 'PNG', optimize=True, **({'dpi': dpi} if dpi else {}))
    return out.getvalue() if len(out.getvalue()) < len(b) else b

def outputs_bytes(nb:dict)->int:
    "Bytes of a notebook's outputs as stored"
    return sum(len(json.dumps(c.get('outputs', []))) for c in nb['cells'])

def shrink_notebook(path, min_bytes:int=20_000)->tuple[int, int]:
    "Shrink every PNG output of `path` larger than `min_bytes`, in place; (outputs bytes before, after)"
    path = Path(path)
    nb = json.loads(path.read_text(encoding='utf-8'))
    before = outputs_bytes(nb)
    changed = False
    for c in nb['cells']:
        for o in c.get('outputs', []):
            d = o.get('data', {})
            png = d.get('image/png')
            if not png: continue
            text = ''.join(png) if isinstance(png, list) else png
            b = base64.b64decode(text)
            if len(b) < min_bytes: continue
            s = shrink_png(b)
            if s is not b:
                d['image/png'] = base64.b64encode(s).decode('ascii') + ('\n' if text.endswith('\n') else '')
                changed = True
    if changed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n', encoding='utf-8')
    return before, outputs_bytes(nb)

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('notebooks', nargs='+')
    ap.add_argument('--check', action='store_true', help=f'list notebooks whose outputs exceed {LIMIT // 1000} KB')
    a = ap.parse_args()
    over = []
    for p in a.notebooks:
        if a.check:
            n = outputs_bytes(json.loads(Path(p).read_text(encoding='utf-8')))
            if n > LIMIT: over.append(p); print(f'{p}: outputs {n // 1000} KB, over {LIMIT // 1000} KB')
        else:
            b, n = shrink_notebook(p)
            print(f'{p}: outputs {b // 1000} KB -> {n // 1000} KB')
    sys.exit(1 if over else 0)

if __name__ == '__main__': main()
