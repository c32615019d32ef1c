#!/usr/bin/env python
"""Docs tools for rope_lit: README.md from nbs/index.ipynb, and an offline check of the docs site.

  python tools/docs.py readme [--check] [--engine auto|offline|quarto]
      Write README.md from nbs/index.ipynb (`--check`: exit 1 if README.md is out of date).
      With Quarto on PATH (`--engine auto`) this is `nbdev-readme`; without it the page is produced
      offline the same way: nbdev's own processing for Quarto (front matter, directives, show_doc),
      then the processed notebook written as GitHub Markdown in pure Python (no pandoc needed).
  python tools/docs.py check [--out _offline_docs] [--install] [PATH ...]
      Process every notebook as nbdev does for Quarto, render each page to HTML with Debian's pandoc
      and a local KaTeX (the site's `html-math-method: katex`), open it in headless Chromium and fail
      on what a reader of the page could not use:
        - raw LaTeX left in the text, a missing image, a Python traceback, an empty page, an external request;
        - words a reader outside the project cannot resolve (internal work items, source documents named by
          file, unnamed hardware, absolute local paths, process notes such as commit hashes, scratch runs,
          budget variables and ../shared paths) in the prose or the outputs;
        - raw dumps in outputs: Python reprs, logs (stderr, HTTP logs, progress bars), dict/list reprs,
          --help dumps, long text outputs;
        - figures under 150 dpi, or shown so much smaller than their size that the labels shrink;
        - a page whose exported code is all hidden (`#| export` only, no `#| exports`), or that shows a function twice
          (its signature by show_doc and its source: the site's doc processor, rope_lit.pages, shows the source once);
        - a shown definition (`#| exports`) not followed by its example or test (past at most one cell of prose);
        - code/output blocks, tables or display equations wider than the column; lists rendered inline;
        - links to an anchor a page does not have; with no PATH given, also links to pages that do not exist,
          pages missing from the sidebar's chapters (orphans), sidebar entries with no page, markup in a sidebar title,
          an index whose reading path runs in another order than the sidebar, and next/previous links switched off.
      Saves screenshots of the index and the `00_*` pages.
      Needs: apt-get install -y chromium pandoc libjs-katex   (or pass --install)
  python tools/docs.py selftest
      Feed the checker small test notebooks (and a test site) with each of those faults and confirm each one
      is caught, and that a good page passes.
"""
import argparse, base64, difflib, html, json, os, re, shutil, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APT_PKGS = ['chromium', 'pandoc', 'libjs-katex']
KATEX_DIR = Path('/usr/share/javascript/katex')
IMG_EXTS = {'.png', '.jpg', '.jpeg', '.gif', '.svg', '.webp'}
_re_ansi = re.compile(r'\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])')
_re_opt = re.compile(r'^#\|\s*([\w-]+)\s*:\s*(.*?)\s*$')

def _text(x): return ''.join(x) if isinstance(x, list) else (x or '')

# ---------------------------------------------------------------------------------------------
# 1. nbdev's own processing step (what `proc_nbs` does to each notebook before Quarto sees it)

def process_nb(src, dst):
    "Apply nbdev's Quarto processors (`FilterDefaults`: front matter, show_doc, directives, hide) to `src`, write `dst`"
    os.chdir(ROOT)  # nbdev reads pyproject.toml from the working directory
    import nbdev.serve_drv
    from nbdev.processors import FilterDefaults
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    nbdev.serve_drv.main((src, dst, FilterDefaults))
    return json.loads(dst.read_text(encoding='utf-8'))

def _proc_worker(a):
    "Process one notebook in a fresh Python (its cells run there): None, or the error"
    src, dst = a
    r = subprocess.run([sys.executable, __file__, '_proc', src, dst], capture_output=True, text=True, cwd=ROOT)
    if r.returncode == 0: return None
    err = r.stderr.strip() or r.stdout.strip()
    i = err.rfind('Exception: Error')  # nbdev's own message names the cell and its source
    lines = err.splitlines()
    msg = ' | '.join(l.strip() for l in err[i + len('Exception: '):].splitlines() if l.strip()) if i >= 0 else \
          (lines[-1] if lines else f'exit status {r.returncode}')
    return msg if len(msg) < 600 else msg[:600] + ' ...'

# ---------------------------------------------------------------------------------------------
# 2. A processed notebook as Markdown, the way Quarto's Jupyter engine reads it
#    flavor 'gfm': GitHub Markdown for README.md; flavor 'pandoc': pandoc Markdown for the HTML pages

class Page:
    def __init__(self, **kw): self.__dict__.update(kw)

def _fence(body, info=''):
    n = max([3] + [len(m) + 1 for m in re.findall(r'`{3,}', body)])
    return f"{'`'*n}{info}\n{body.rstrip(chr(10))}\n{'`'*n}"

def _cell_opts(src):
    "Quarto cell options (`#| key: value` lines at the top) and the source without them"
    import yaml
    lines, opts = src.splitlines(), {}
    i = 0
    for i, l in enumerate(lines):
        m = _re_opt.match(l)
        if not m: break
        try: opts[m.group(1)] = yaml.safe_load(m.group(2))
        except Exception: opts[m.group(1)] = m.group(2)
    else: i = len(lines)
    return opts, '\n'.join(lines[i:]).strip('\n')

def _mime(data):
    "The output format Quarto picks for an HTML page (see quarto-cli `displayDataMimeType`)"
    data = dict(data)
    lat = _text(data.get('text/latex', '')).strip()
    if lat and 'text/markdown' not in data and ((lat.startswith('$') and lat.endswith('$')) or
                                               (lat.startswith('\\begin{') and '\\end{' in lat)):
        data['text/markdown'] = lat  # LaTeX math output becomes Markdown math, as in Quarto
    for m in ('text/html', 'text/markdown', 'image/svg+xml', 'image/png', 'image/jpeg', 'text/plain'):
        if m in data: return m, data
    return None, data

def _gfm_fix(md):
    "Pandoc-Markdown-only syntax that GitHub would show verbatim: link attributes, fenced divs, heading ids"
    def a(m): 
        attrs = re.sub(r'(?<![\w-])([\w-]+)=', r' \1=', m.group(3)).strip()
        return f'<a href="{m.group(2)}" {attrs}>{m.group(1)}</a>'
    md = re.sub(r'\[([^\]\n]+)\]\(([^)\s]+)\)\{([^}\n]*)\}', a, md)
    md = re.sub(r'(?m)^:::+.*\n?', '', md)
    md = re.sub(r'(?m)^(#+ .*?)\s*\{[#.][^}\n]*\}\s*$', r'\1', md)
    return md

def _link_fix(md, fn):
    "Apply `fn` to the target of every Markdown link and image"
    return re.sub(r'(\]\()([^)\s]+)(\))', lambda m: m.group(1) + fn(m.group(2)) + m.group(3), md)

def nb_to_md(nb, stem, flavor, fig_dir, link=None):
    """Markdown for processed notebook `nb`: returns a `Page` with `md`, `title`, `description`,
    `files` (relative path -> bytes, the output images) and `tracebacks` (error outputs found)"""
    import yaml
    gfm = flavor == 'gfm'
    cells, parts, files, tracebacks, fm = nb['cells'], [], {}, [], {}
    if cells and cells[0]['cell_type'] == 'raw' and _text(cells[0]['source']).lstrip().startswith('---'):
        fm = yaml.safe_load(_text(cells[0]['source']).strip().strip('-')) or {}
        cells = cells[1:]
        if gfm:
            parts.append(f"# {fm.get('title', stem)}")
            if fm.get('description'): parts.append(f"> {fm['description']}")
        else: parts.append('---\n' + yaml.safe_dump(fm, sort_keys=True, allow_unicode=True) + '---')
    for ci, cell in enumerate(cells, 1):
        src = _text(cell.get('source', ''))
        if cell['cell_type'] == 'markdown':
            for name, data in sorted((cell.get('attachments') or {}).items()):
                mime = next(iter(data))
                rel = f'{fig_dir}/attachments/{name}'
                files[rel] = base64.b64decode(_text(data[mime]))
                src = src.replace(f'attachment:{name}', rel)
            if link: src = _link_fix(src, link)
            parts.append(_gfm_fix(src) if gfm else src)
            continue
        if cell['cell_type'] == 'raw':
            parts.append(src); continue
        opts, code = _cell_opts(src)
        if opts.get('include') is False: continue
        out = []
        if code and opts.get('echo') is not False:
            block = _fence(code, cell.get('metadata', {}).get('language', 'python'))
            if opts.get('code-fold'):
                summary = html.escape(str(opts.get('code-summary', 'Code')))
                block = f"<details{' open' if opts['code-fold'] == 'show' else ''}>\n<summary>{summary}</summary>\n\n{block}\n\n</details>"
            out.append(block)
        outputs = [] if opts.get('output') is False else cell.get('outputs', [])
        asis = opts.get('output') == 'asis'
        streams = {}
        for oi, o in enumerate(outputs, 1):
            ot = o['output_type']
            if ot == 'stream':
                txt = _re_ansi.sub('', _text(o.get('text', '')))
                if 'Traceback (most recent call last)' in txt: tracebacks.append(f'cell {ci}: traceback in {o.get("name")}')
                if o.get('name') in streams: streams[o['name']][1] += txt; continue
                streams[o['name']] = ent = [len(out), txt]
                out.append(ent)
                continue
            if ot == 'error':
                tb = _re_ansi.sub('', '\n'.join(o.get('traceback', [])) or f"{o.get('ename')}: {o.get('evalue')}")
                tracebacks.append(f"cell {ci}: {o.get('ename')}: {_re_ansi.sub('', str(o.get('evalue')))[:200]}")
                out.append(_fence(tb) if gfm else f'::: {{.cell-output .cell-output-error}}\n{_fence(tb)}\n:::')
                continue
            mime, data = _mime(o.get('data', {}))
            if mime is None: continue
            val = data[mime]
            if mime in ('image/png', 'image/jpeg', 'image/svg+xml'):
                ext = {'image/png': 'png', 'image/jpeg': 'jpg', 'image/svg+xml': 'svg'}[mime]
                rel = f'{fig_dir}/cell-{ci}-output-{oi}.{ext}'
                files[rel] = _text(val).encode() if ext == 'svg' else base64.b64decode(_text(val))
                md = f'![]({rel})'
                w = (o.get('metadata', {}).get(mime) or {}).get('width')
                if w and not gfm: md = f'![]({rel}){{width={int(w)}}}'
                elif w: md = f'<img src="{rel}" width="{int(w)}" />'
            elif mime == 'text/html':
                h = _text(val).strip('\n')
                md = '\n'.join(l for l in h.splitlines() if l.strip()) if gfm else f'```{{=html}}\n{h}\n```'
            elif mime == 'text/markdown':
                md = _text(val).strip('\n')
                if link: md = _link_fix(md, link)
                if gfm: md = _gfm_fix(md)
            else:
                md = _text(val).strip('\n') if asis else _fence(_re_ansi.sub('', _text(val)))
            if not gfm and not asis: md = f'::: {{.cell-output .cell-output-display}}\n{md}\n:::'
            out.append(md)
        for i, o in enumerate(out):
            if isinstance(o, list):
                name = [k for k, v in streams.items() if v is o][0]
                out[i] = _fence(o[1]) if gfm else f'::: {{.cell-output .cell-output-{name}}}\n{_fence(o[1])}\n:::'
        if out: parts.append('\n\n'.join(out) if gfm else '::: {.cell}\n' + '\n\n'.join(out) + '\n:::')
    md = '\n\n'.join(p.strip('\n') for p in parts if p.strip()) + '\n'
    return Page(md=md, title=str(fm.get('title', stem)), description=fm.get('description'), fm=fm,
                files=files, tracebacks=tracebacks, stem=stem)

# ---------------------------------------------------------------------------------------------
# 3. README.md

def _cfg():
    os.chdir(ROOT)
    from nbdev.config import get_config
    return get_config()

def readme_offline():
    "README.md text and its image files, from the readme notebook processed by nbdev, written as GitHub Markdown"
    cfg = _cfg()
    src = cfg.nbs_path/cfg.readme_nb
    from nbdev.readme_filter import doc_link
    base = cfg.doc_url if cfg.get('doc_host') else None
    nbdir = Path(cfg.readme_nb).parent.as_posix()
    link = (lambda t: doc_link(t, base, nbdir)) if base else None
    with tempfile.TemporaryDirectory() as d:
        nb = process_nb(src, Path(d)/src.name)
    stem = Path(cfg.readme_nb).stem
    page = nb_to_md(nb, stem, 'gfm', f'{stem}_files/figure-commonmark', link=link)
    return page.md, page.files

def readme_quarto():
    "README.md as nbdev-readme writes it with Quarto (in a scratch copy of the project, so nothing here changes)"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)/'proj'
        shutil.copytree(ROOT, tmp, ignore=shutil.ignore_patterns('.git', '.venv*', '_proc', '_docs', '_offline_docs', '__pycache__'))
        r = subprocess.run(['nbdev-readme'], cwd=tmp, capture_output=True, text=True)
        if r.returncode: sys.exit(f'docs: nbdev-readme failed:\n{r.stdout}\n{r.stderr}')
        files = {str(p.relative_to(tmp)): p.read_bytes() for p in (tmp/'index_files').rglob('*') if p.is_file()} if (tmp/'index_files').exists() else {}
        return (tmp/'README.md').read_text(encoding='utf-8'), files

def pypi_faults(md:str)->list:
    "What PyPI cannot show in `md`: math (it renders no LaTeX) and links or images relative to the repository"
    text = re.sub(r'(?s)```.*?```|`[^`\n]*`', '', md)              # code is shown as written
    faults = [f'raw LaTeX "{m.group(0)[:40]}" (PyPI renders no math: write it in Unicode)'
              for m in re.finditer(r'\$\$.+?\$\$|(?<![\w$])\$[^$\s][^$\n]*?[^$\s]\$(?![\w$])', text)]
    faults += [f'relative link "{m.group(1)[:60]}" (PyPI has no repository beside it: use an absolute URL)'
               for m in re.finditer(r'!?\[[^\]]*\]\((?!https?://|#|mailto:)([^)\s]+)\)', text)]
    return faults

def cmd_readme(args):
    engine = args.engine
    if engine == 'auto': engine = 'quarto' if shutil.which('quarto') else 'offline'
    if engine == 'quarto' and not shutil.which('quarto'): sys.exit('docs: --engine quarto but `quarto` is not on PATH')
    if engine == 'quarto' and not args.check:  # exactly nbdev's own command
        r = subprocess.run(['nbdev-readme'], cwd=ROOT)
        print(f'docs: nbdev-readme {"wrote README.md (quarto)" if r.returncode == 0 else "failed"}')
        return r.returncode
    md, files = readme_quarto() if engine == 'quarto' else readme_offline()
    readme = ROOT/'README.md'
    if args.check:
        pypi = pypi_faults(md)   # README.md is also the package's description on PyPI
        for f in pypi: print(f'docs: README.md as the PyPI description: {f}')
        if pypi: return 1
        old = readme.read_text(encoding='utf-8') if readme.exists() else ''
        bad = [f for f, b in files.items() if not (ROOT/f).exists() or (ROOT/f).read_bytes() != b]
        if old == md and not bad:
            print(f'docs: README.md is up to date with nbs/index.ipynb ({engine})'); return 0
        print(f'docs: README.md is OUT OF DATE with nbs/index.ipynb ({engine} generator). '
              f'Run `python tools/docs.py readme` and commit the result.')
        if bad: print('docs: image files missing or different: ' + ', '.join(bad))
        diff = list(difflib.unified_diff(old.splitlines(), md.splitlines(), 'README.md (committed)', 'README.md (expected)', lineterm='', n=1))
        print('\n'.join(diff[:60]) + ('\n...' if len(diff) > 60 else ''))
        return 1
    readme.write_text(md, encoding='utf-8')
    for f, b in files.items():
        (ROOT/f).parent.mkdir(parents=True, exist_ok=True); (ROOT/f).write_bytes(b)
    print(f'docs: wrote README.md ({engine}){" and " + str(len(files)) + " image(s)" if files else ""}')
    return 0

# ---------------------------------------------------------------------------------------------
# 4. The offline docs check

_TEMPLATE = r'''<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1" />
<title>$pagetitle$</title>
$if(highlighting-css)$
<style>
$highlighting-css$
</style>
$endif$
$for(css)$
<link rel="stylesheet" href="$css$" />
$endfor$
$math$
</head>
<body>
$for(include-before)$
$include-before$
$endfor$
<div id="page">
<header id="title-block-header">
<h1 class="title">$title$</h1>
$if(description)$
<div class="description">$description$</div>
$endif$
</header>
<main id="content">
$body$
</main>
</div>
$for(include-after)$
$include-after$
$endfor$
</body>
</html>
'''

_CSS = '''body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; line-height: 1.5;
  color: #212529; margin: 0; display: flex; }
nav.sidebar { width: 15rem; flex: none; padding: 1rem; border-right: 1px solid #dee2e6; font-size: 0.9rem; }
nav.sidebar a { display: block; color: #2780e3; text-decoration: none; margin: 0.3rem 0; }
nav.sidebar a.active { font-weight: bold; }
nav.sidebar .section { font-weight: 600; color: #495057; margin: 0.9rem 0 0.2rem; text-transform: uppercase; font-size: 0.75rem; }
#page { flex: 1; min-width: 0; max-width: 56rem; padding: 1rem 2rem; overflow-x: hidden; }
h1.title { margin-bottom: 0.2rem; }
pre { background: #f8f9fa; padding: 0.6rem; overflow-x: auto; font-size: 0.85rem; }
code { font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.5rem 0; }
th, td { border: 1px solid #dee2e6; padding: 0.2rem 0.5rem; }
img { max-width: 100%; }
.cell-output-error pre { background: #fff0f0; }
.cell-output-stderr pre { background: #fff8e6; }
'''

# Runs in the page once it has loaded (KaTeX rendered, images fetched); leaves its findings as JSON in the DOM.
_PROBE = r'''<script>
window.addEventListener('load', function () { setTimeout(function () {
  var r = {};
  r.brokenImages = Array.from(document.images).filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                        .map(function (i) { return i.getAttribute('src'); });
  r.katexErrors = Array.from(document.querySelectorAll('.katex-error')).map(function (e) { return e.textContent.slice(0, 160); });
  r.unrenderedMath = Array.from(document.querySelectorAll('span.math')).filter(function (e) { return !e.querySelector('.katex'); })
                          .map(function (e) { return e.textContent.slice(0, 160); });
  function visible(el) {
    var c = el.cloneNode(true);
    c.querySelectorAll('script,style,noscript,pre,code,.katex-mathml,math,annotation,nav').forEach(function (e) { e.remove(); });
    return c.textContent;
  }
  var page = document.getElementById('page') || document.body, main = document.getElementById('content') || page;
  r.text = visible(page);
  r.mainText = visible(main);
  r.images = main.querySelectorAll('img').length;
  r.preText = Array.from(main.querySelectorAll('pre')).map(function (e) { return e.textContent; }).join('\n');
  r.errorOutputs = main.querySelectorAll('.cell-output-error').length;
  r.external = performance.getEntriesByType('resource').map(function (e) { return e.name; })
                          .filter(function (n) { return !/^(file|data|blob|about):/.test(n); });
  r.height = Math.max(document.documentElement.scrollHeight, document.body.scrollHeight);
  // what does not fit the column: code/output blocks that scroll sideways, tables and display math wider than it
  var col = main.clientWidth;
  function excerpt(e) { return (e.textContent || '').trim().split('\n')[0].slice(0, 80); }
  r.wideBlocks = Array.from(main.querySelectorAll('pre')).filter(function (e) { return e.scrollWidth > e.clientWidth + 2; })
                      .map(function (e) { return {px: e.scrollWidth, col: e.clientWidth, text: excerpt(e)}; });
  r.wideTables = Array.from(main.querySelectorAll('table')).filter(function (e) {
                      return Math.max(e.scrollWidth, e.getBoundingClientRect().width) > col + 2; })
                      .map(function (e) { return {px: Math.round(e.getBoundingClientRect().width), col: col, text: excerpt(e)}; });
  r.wideMath = Array.from(main.querySelectorAll('.katex-display')).filter(function (e) {
                      var k = e.querySelector('.katex'); return e.scrollWidth > e.clientWidth + 2 || (k && k.getBoundingClientRect().width > col + 2); })
                      .map(function (e) { return {px: e.scrollWidth, col: col, text: excerpt(e.querySelector('annotation') || e)}; });
  // a list that pandoc ran into the paragraph before it (no blank line): its items stay in the paragraph's text
  r.inlineLists = Array.from(main.querySelectorAll('p')).filter(function (e) {
                      return /\n\s*([-*+]|\d+\.)\s+\S/.test(e.textContent); }).map(function (e) { return e.textContent.slice(0, 100); });
  r.imageSizes = Array.from(main.querySelectorAll('img')).map(function (i) {
                      return {src: i.getAttribute('src'), natural: i.naturalWidth, shown: i.getBoundingClientRect().width}; });
  var s = document.createElement('script'); s.type = 'application/json'; s.id = 'docscheck';
  s.textContent = JSON.stringify(r).replace(/</g, '\\u003c');
  document.body.appendChild(s);
}, 0); });
</script>
'''

_re_raw_tex = [
    (re.compile(r'\$\$'), 'raw $$'),
    (re.compile(r'\\(?:begin|end)\{'), r'raw \begin/\end'),
    (re.compile(r'\\[A-Za-z]{2,}'), r'raw LaTeX command'),
    (re.compile(r'(?<![\w$])\$(?!\s*\d)([^$\n]{1,200}?)\$(?!\w)'), r'raw $...$'),
]

def raw_tex(text):
    "LaTeX that is still visible as source in rendered text: a list of (kind, excerpt)"
    found = []
    for rx, kind in _re_raw_tex:
        for m in rx.finditer(text):
            if kind == r'raw $...$':
                inner = m.group(1).strip()
                if not (re.search(r'[\\^_{}=]', inner) or re.fullmatch(r'[A-Za-z]', inner)): continue
            s = max(0, m.start() - 30)
            found.append((kind, ' '.join(text[s:m.end() + 30].split())))
    return found

# ---------------------------------------------------------------------------------------------
# 4a. What a reader outside the project cannot use: internal words, raw dumps, small figures, hidden code

# Words a reader of the site cannot resolve (the same classes as the team's reader lint, and a few more).
READER_WORDS = [
    (re.compile(r"\b[Ii]ssues? ?#?\d+\b|\bthe issue'?s\b|\bissue'?s targets\b"), 'an internal work item ("issue 6")'),
    (re.compile(r'\bseeds? 00\d\b|shared/seeds|\bseeds/'), 'a source document named by its file ("seed 000"): cite title, author, year'),
    (re.compile(r'this machine|dev(elopment)? (VM|CPU|machine)|\blent\b|this VM'), 'unnamed hardware ("this machine"): name it'),
    (re.compile(r'(?<![\w.])/(tmp|work|root|home)/'), 'an absolute local path'),
    (re.compile(r'\b(?:commits?|at|since) `?[0-9a-f]{7,40}\b|\bscratch (?:A/B|runs?|scripts?|folders?|files?|notebooks?|copy)\b'
                r'|\b(?:BUDGET|DEADLINE|OUT_?[AB]?)=|\.\./shared/'),
     'a process note (commit hash, scratch run, budget variable, ../shared path): say what the reader can use'),
    (re.compile(r'\b(?:PLACEHOLDER|TODO|TBD|FIXME|XXX)\b|\blorem ipsum\b'), 'unfinished text (a placeholder): write it'),
]
# Raw reprs and logs in an output: the output is not for reading.
DUMPS = [
    (re.compile(r'CompletedProcess\(|PosixPath\(|WindowsPath\(|\bNamespace\(\w+=|<[\w.]+ object at 0x[0-9a-f]+>'), 'a raw Python repr'),
    (re.compile(r'"(GET|POST|HEAD) /[^"]*" \d{3}|\s-\s-\s\[\d'), 'an HTTP server log'),
    (re.compile(r'(?m)^(INFO|DEBUG|WARNING|ERROR|CRITICAL)[:\s]|^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\n]*\b(INFO|DEBUG|WARNING)\b'), 'log lines'),
    (re.compile(r'\d+%\|[^\n]*\|[^\n]*(it/s|s/it)'), 'a progress bar'),
]

def _out_text(o):
    if o['output_type'] == 'stream': return _text(o.get('text', ''))
    d = o.get('data', {})
    return _text(d.get('text/plain', '')) if not any(m in d for m in ('text/html', 'text/markdown', 'image/png', 'image/svg+xml', 'image/jpeg')) else ''

def reader_faults(nb):
    """Problems a reader meets in processed notebook `nb` (hidden cells already removed): internal words in the prose
    and outputs, raw reprs, logs, stderr output and long unexplained text dumps"""
    probs, words = [], {}
    def look(t, where):
        for rx, what in READER_WORDS:
            for m in rx.finditer(t): words.setdefault(what, []).append(f'{where}: "{m.group(0)}"')
    for ci, c in enumerate(nb['cells'], 1):
        src = _text(c.get('source', ''))
        if c['cell_type'] == 'markdown': look(src, f'cell {ci}'); continue
        if c['cell_type'] != 'code': continue
        opts, _ = _cell_opts(src)
        if opts.get('include') is False or opts.get('output') is False: continue
        for o in c.get('outputs', []):
            d = o.get('data', {})
            t = _out_text(o)
            look(t + _text(d.get('text/markdown', '')) + _text(d.get('text/html', '')), f'cell {ci} output')
            if o['output_type'] == 'stream' and o.get('name') == 'stderr' and t.strip():
                probs.append(f'log on stderr shown (cell {ci}): "{t.strip().splitlines()[0][:80]}"')
            for rx, what in DUMPS:
                m = rx.search(t)
                if m: probs.append(f'{what} in an output (cell {ci}): "{m.group(0)[:60]}"')
            lines = t.rstrip().splitlines()
            if o['output_type'] != 'stream' and len(lines) >= 4 and re.match(r'^[\[{(]', t.lstrip()) and \
               re.search(r"['\"][\w ./-]+['\"]\s*:|\{'|\(\[|\[\(", t):
                probs.append(f'a raw dict/list repr of {len(lines)} lines (cell {ci}): "{lines[0][:60]}"')
            elif re.search(r'(?m)^usage: ', t) and len(lines) > 15:
                probs.append(f'a {len(lines)}-line --help dump (cell {ci})')
            elif len(lines) > 40 and opts.get('output') != 'asis':
                probs.append(f'a {len(lines)}-line text output (cell {ci}): summarise it as a table or figure')
    for what, hits in words.items():
        probs.append(f'{what}: {len(hits)} place(s), e.g. ' + '; '.join(hits[:3]))
    return probs

def export_faults(raw):
    "A page that exports code but shows none of it (nbdev's `#| export` hides the source; `#| exports` shows it)"
    hidden = shown = 0
    for c in raw['cells']:
        if c['cell_type'] != 'code': continue
        for l in _text(c.get('source', '')).splitlines():
            m = re.match(r'^#\|\s*(export|exporti|exports)\s*$', l.strip())
            if m: shown += m.group(1) == 'exports'; hidden += m.group(1) != 'exports'; break
    if hidden and not shown:
        return [f'all {hidden} exported cells are hidden (`#| export`): show the code the page explains with `#| exports`']
    return []

def size_faults(raw):
    "A notebook whose stored outputs exceed shrink_figures.LIMIT: it is slow to open and to diff"
    sys.path.insert(0, str(Path(__file__).parent))
    from shrink_figures import LIMIT, outputs_bytes   # the same count the shrinking tool reports
    n = outputs_bytes(raw)
    return [f'outputs of {n // 1000} KB, over {LIMIT // 1000} KB: shrink the figures '
            f'(python tools/shrink_figures.py) or summarise big outputs'] if n > LIMIT else []

def ending_faults(raw):
    "A page whose last visible cell is shown code (a test or an example) rather than prose or a result"
    for c in reversed(raw['cells']):
        src = _text(c.get('source', ''))
        if c['cell_type'] == 'markdown':
            if src.strip(): return []
            continue
        if c['cell_type'] != 'code': continue
        if re.search(r'(?m)^#\|\s*(hide|export|exporti)\s*$', src): continue      # nothing of it is shown
        if re.search(r'(?m)^#\|\s*echo:\s*false\s*$', src):
            if c.get('outputs'): return []                                     # ends on a table or figure
            continue
        return ['page ends on code: close it with prose (what the page showed, where to read next)']
    return []

def example_faults(raw):
    """A definition the page shows (`#| exports`) with no example or test right after it: the next visible cell,
    past at most one cell of prose, must be shown code (a page reads definition, then what it does). Whether that
    code exercises the definition is left to the reader's review: the check cannot tell."""
    from rope_lit.pages import defined_names
    cells, lonely = raw['cells'], []
    hidden = lambda c: c['cell_type'] == 'code' and re.search(r'(?m)^#\|\s*(hide|export|exporti)\s*$', _text(c.get('source', '')))
    for i, c in enumerate(cells):
        src = _text(c.get('source', ''))
        if c['cell_type'] != 'code' or not re.search(r'(?m)^#\|\s*exports\s*$', src): continue
        j, prose = i + 1, 0
        while j < len(cells) and (cells[j]['cell_type'] != 'code' or hidden(cells[j])):
            prose += cells[j]['cell_type'] == 'markdown'; j += 1
        nxt = _text(cells[j].get('source', '')) if j < len(cells) else ''
        if j == len(cells) or prose > 1 or re.search(r'(?m)^#\|\s*(exports?|echo:\s*false)\s*$', nxt):
            lonely.append(', '.join(sorted(defined_names(src))) or f'cell {i}')
    if lonely: return [f'shown definition with no example or test right after it: {len(lonely)}, e.g. {"; ".join(lonely[:4])}']
    return []

_re_show_doc = re.compile(r'^show_doc\(\s*([\w.]+)', re.M)

def twice_faults(nb):
    """A function shown twice on processed page `nb`: a `show_doc` block with its signature, and its source in a visible
    cell (`#| exports`, or plain code). The site shows the source once, with a heading (doc_procs in pyproject.toml)."""
    from rope_lit.pages import defined_names   # the names the site's doc processor looks for, found the same way
    sigs, shown = set(), set()
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        opts, code = _cell_opts(_text(c.get('source', '')))
        if opts.get('include') is False: continue
        m = _re_show_doc.search(code)
        if m:
            out = ''.join(_text(o.get('data', {}).get('text/markdown', '')) for o in c.get('outputs', []))
            if '```python' in out and opts.get('output') is not False: sigs.add(m.group(1))
        elif code and opts.get('echo') is not False: shown |= defined_names(code)
    both = sorted(sigs & shown)
    if both: return [f'function shown twice (its signature by show_doc, then its source): {len(both)}, e.g. {", ".join(both[:4])}']
    return []

def png_dpi(b):
    "The resolution a PNG records (its pHYs chunk), in dots per inch; None if it records none"
    import struct
    if not b.startswith(b'\x89PNG'): return None
    i = 8
    while i + 8 <= len(b):
        n, kind = struct.unpack('>I4s', b[i:i + 8])
        if kind == b'pHYs':
            x, y, unit = struct.unpack('>IIB', b[i + 8:i + 17])
            return round(x * 0.0254) if unit == 1 else None
        if kind == b'IDAT': return None   # pHYs must come before the image data
        i += 12 + n
    return None

MIN_DPI, MIN_SHOWN_DPI = 150, 75

def image_faults(name, b, shown=None, natural=None):
    "A figure below MIN_DPI, or shown so much smaller than its size that its labels shrink below MIN_SHOWN_DPI"
    if not name.lower().endswith('.png'): return []
    dpi = png_dpi(b)
    if dpi is None or dpi < MIN_DPI - 1:
        return [f'figure below {MIN_DPI} dpi ({dpi or "no"} dpi recorded): {name}']
    if shown and natural and dpi * shown / natural < MIN_SHOWN_DPI:
        return [f'figure shown at {shown / natural:.0%} of its size, so its labels shrink to {dpi * shown / natural:.0f} dpi: '
                f'{name} (make it narrower)']
    return []

# ---------------------------------------------------------------------------------------------
# 4b. The site as a whole: chapters in the sidebar, no page outside them

def _sidebar_entries(node):
    if isinstance(node, str): yield node
    elif isinstance(node, list):
        for n in node: yield from _sidebar_entries(n)
    elif isinstance(node, dict):
        if 'href' in node: yield node['href']
        for k in ('contents', 'sidebar'): 
            if k in node: yield from _sidebar_entries(node[k])

def sidebar_sections(nbs):
    "The sidebar's chapters as [(title, [file, ...]), ...] from `nbs`/sidebar.yml (nbdev's custom sidebar)"
    import yaml
    f = Path(nbs)/'sidebar.yml'
    if not f.exists(): return None
    sb = (yaml.safe_load(f.read_text()) or {}).get('website', {}).get('sidebar', {})
    out = []
    for item in sb.get('contents', []):
        if isinstance(item, dict) and 'section' in item: out.append((item['section'], list(_sidebar_entries(item.get('contents', [])))))
        else: out.append((None, list(_sidebar_entries(item))))
    return out

def _render_patterns(nbs):
    import yaml
    q = Path(nbs)/'_quarto.yml'
    return ((yaml.safe_load(q.read_text()) or {}).get('project', {}) or {}).get('render') if q.exists() else None

def _resources(nbs):
    "The `project: resources:` globs of _quarto.yml: files Quarto copies to the site as they are"
    import yaml
    q = Path(nbs)/'_quarto.yml'
    r = ((yaml.safe_load(q.read_text()) or {}).get('project', {}) or {}).get('resources') if q.exists() else None
    return [r] if isinstance(r, str) else list(r or [])

def page_title(f):
    "The title Quarto gives notebook `f`: its front matter's, else its first `# Title` (what nbdev makes front matter of)"
    import yaml
    try: cells = json.loads(Path(f).read_text(encoding='utf-8'))['cells']
    except Exception: return None
    for c in cells:
        src = _text(c.get('source', '')).strip()
        if c['cell_type'] == 'raw' and src.startswith('---'):
            t = (yaml.safe_load(src.strip('-')) or {}).get('title')
            if t: return str(t)
        if c['cell_type'] == 'markdown':
            m = re.match(r'#\s+(.+)', src)
            return m.group(1).strip() if m else None
    return None

def index_path(nbs, pages):
    "The reading path the index gives: the pages among `pages` in the order the index first links to them (links to a section excluded)"
    f = Path(nbs)/'index.ipynb'
    if not f.exists(): return []
    md = '\n'.join(_text(c.get('source', '')) for c in json.loads(f.read_text(encoding='utf-8'))['cells'] if c['cell_type'] == 'markdown')
    path = []
    for t in re.findall(r'\]\(([^)\s#]+)\)', md):
        if t in pages and t not in path: path.append(t)
    return path

# Markup that a sidebar or browser tab shows verbatim: code ticks, emphasis, links, HTML
_re_markup = re.compile(r'`|\*|(?<![\w])_\S|\S_(?![\w])|\[[^\]]*\]\(|<[A-Za-z/]')

def site_faults(nbs):
    """Pages Quarto would render that the sidebar does not list (orphans), sidebar entries with no page,
    a sidebar without chapters, markup in a sidebar title, and next/previous links switched off"""
    import fnmatch, yaml
    nbs = Path(nbs)
    secs = sidebar_sections(nbs)
    if secs is None: return ['no sidebar.yml: the site has no chapters (set custom_sidebar and write nbs/sidebar.yml)']
    listed = [f for _, fs in secs for f in fs]
    probs = [f'sidebar entry with no page: {f}' for f in listed if not (nbs/f).exists()]
    titles = [(f'section "{t}"', t) for t, _ in secs if t] + [(f, page_title(nbs/f)) for f in listed if (nbs/f).exists()]
    probs += [f'markup in a sidebar title (shown as typed): {w}: "{t}"' for w, t in titles if t and _re_markup.search(t)]
    path = index_path(nbs, listed)
    order = [f for f in listed if f in path]
    if path != order:
        probs.append('the index routes readers in another order than the sidebar: index ' + ' > '.join(path) +
                     '; sidebar ' + ' > '.join(order))
    q = nbs/'_quarto.yml'
    web = ((yaml.safe_load(q.read_text()) or {}).get('website') or {}) if q.exists() else {}
    if web.get('page-navigation') is not True:
        probs.append('no next/previous links: set `page-navigation: true` under `website:` in _quarto.yml')
    if sum(t is not None for t, _ in secs) < 2: probs.append('the sidebar has fewer than two chapters (sections)')
    pats = _render_patterns(nbs)
    cands = [p.relative_to(nbs).as_posix() for p in nbs.rglob('*') if p.suffix in ('.ipynb', '.qmd', '.md') and
             not any(x.startswith(('_', '.')) for x in p.relative_to(nbs).parts)]
    def rendered(rel):
        if not pats: return True
        inc = [x for x in pats if not x.startswith('!')]; exc = [x[1:] for x in pats if x.startswith('!')]
        return any(fnmatch.fnmatch(rel, x) and ('/' in x or '/' not in rel) for x in inc) and not any(fnmatch.fnmatch(rel, x) for x in exc)
    probs += [f'orphan page (rendered, but in no chapter of the sidebar): {rel}' for rel in sorted(cands) if rendered(rel) and rel not in listed]
    return probs

def tools_missing():
    "apt packages whose tools are missing"
    miss = []
    if not _browser(): miss.append('chromium')
    if not shutil.which('pandoc'): miss.append('pandoc')
    if not (KATEX_DIR/'katex.min.js').exists(): miss.append('libjs-katex')
    return miss

def _browser():
    "Chromium, or Google Chrome where it is preinstalled instead (GitHub's Ubuntu runners)"
    return next((shutil.which(b) for b in ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable') if shutil.which(b)), None)

def _chromium(url, extra, timeout=90):
    exe = _browser()
    with tempfile.TemporaryDirectory() as prof:
        cmd = [exe, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
               '--disable-background-networking', '--disable-component-update', '--disable-sync',
               '--disable-extensions', '--host-resolver-rules=MAP * ~NOTFOUND', f'--user-data-dir={prof}',
               '--virtual-time-budget=5000', *extra, url]
        try: return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired: return None

def probe_page(path):
    "Open `path` in headless Chromium; the probe's findings (dict), or None if the page did not load"
    r = _chromium(path.resolve().as_uri(), ['--window-size=1280,1600', '--dump-dom'])
    if r is None: return None
    m = re.search(r'<script type="application/json" id="docscheck">(.*?)</script>', r.stdout, re.S)
    return json.loads(m.group(1)) if m else None

def screenshot(path, png, height):
    r = _chromium(path.resolve().as_uri(), [f'--window-size=1280,{height}', f'--screenshot={png.resolve()}', '--hide-scrollbars'])
    return r is not None and png.exists()

def _notebooks(paths, cfg):
    from nbdev.doclinks import nbglob
    files = []
    for p in paths or [cfg.nbs_path]:
        p = Path(p).absolute()
        if p.is_dir(): files += nbglob(p, as_path=True)  # skips `_*` and hidden files, like nbdev-docs
        elif p.suffix == '.ipynb' and p.exists(): files.append(p)
        else: sys.exit(f'docs: PATH {p} is neither a notebook nor a folder')
    return sorted(set(files), key=lambda f: (f.stem != 'index', f.name))

def render_pages(files, out, jobs):
    "Process and render every notebook to `out`/<page>.html; returns a list of page dicts"
    stage = out/'_proc'
    shutil.rmtree(stage, ignore_errors=True)
    args = [(str(f), str(stage/f.name)) for f in files]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex: errs = list(ex.map(_proc_worker, args))
    from nbdev.doclinks import nbglob
    site = set(files) | {Path(f) for d in {f.parent for f in files} for f in nbglob(d, as_path=True)}
    # every page of the site, so that links to pages not checked this time still point at their .html
    nbmap = {f.name: (f.stem if f.stem == 'index' else re.sub(r'^\d+[a-z]?_', '', f.stem)) + '.html' for f in site}
    pages = []
    for f, err in zip(files, errs):
        pg = dict(nb=f, name=f.stem, html=out/nbmap[f.name], problems=[], title=f.stem, md=None)
        if err: pg['problems'].append(f'nbdev processing failed: {err}')
        else:
            nb = json.loads((stage/f.name).read_text(encoding='utf-8'))
            def link(t, _m=nbmap):
                p, _, frag = t.partition('#')
                return (_m[p] + ('#' + frag if frag else '')) if p in _m else t
            page = nb_to_md(nb, f.stem, 'pandoc', f'{f.stem}_files/figure-html', link=link)
            out_file = page.fm.get('output-file')
            if out_file: pg['html'] = out/out_file
            pg.update(title=page.title, md=page.md)
            pg['problems'] += [f'Python traceback in an output ({t})' for t in page.tracebacks]
            raw = json.loads(f.read_text(encoding='utf-8'))
            pg['problems'] += reader_faults(nb) + export_faults(raw) + ending_faults(raw) + twice_faults(nb) + size_faults(raw) + example_faults(raw)
            for rel, b in page.files.items():
                (out/rel).parent.mkdir(parents=True, exist_ok=True); (out/rel).write_bytes(b)
        pages.append(pg)
    def a(p): return f'<a href="{p["html"].name}" data-page="{p["html"].name}">{html.escape(p["title"])}</a>'
    secs = sidebar_sections(files[0].parent) if files else None
    byname = {p['nb'].name: p for p in pages}
    if secs:  # the chapters of the real site's sidebar (nbs/sidebar.yml); pages it does not list come last
        listed, parts = set(), []
        for title, fs in secs:
            ps = [byname[f] for f in fs if f in byname]
            listed.update(f for f in fs)
            if ps: parts.append((f'<div class="section">{html.escape(title)}</div>\n' if title else '') + '\n'.join(a(p) for p in ps))
        rest = [p for p in pages if p['nb'].name not in listed]
        if rest: parts.append('\n'.join(a(p) for p in rest))
        nav = '<nav class="sidebar">\n' + '\n'.join(parts) + '\n</nav>\n'
    else: nav = '<nav class="sidebar">\n' + '\n'.join(a(p) for p in pages) + '\n</nav>\n'
    tpl, css, navf, probe = out/'_template.html', out/'_docs.css', out/'_nav.html', out/'_probe.html'
    tpl.write_text(_TEMPLATE); css.write_text(_CSS); navf.write_text(nav); probe.write_text(_PROBE)
    for pg in pages:
        if pg['md'] is None: continue
        mdf = stage/(pg['name'] + '.md')
        mdf.write_text(pg['md'], encoding='utf-8')
        navp = out/f'_nav_{pg["name"]}.html'
        navp.write_text(nav.replace(f'data-page="{pg["html"].name}"', f'class="active" data-page="{pg["html"].name}"'))
        cmd = ['pandoc', str(mdf), '--from', 'markdown', '--to', 'html5', '--standalone', '--wrap=preserve', '--template', str(tpl),
               '--katex=_katex/', '--css', '_docs.css', '--css', 'styles.css', '--include-before-body', str(navp),
               '--include-after-body', str(probe), '--metadata', f'pagetitle={pg["title"]}', '-o', str(pg['html'])]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=out)
        navp.unlink()
        if r.returncode: pg['problems'].append(f'pandoc failed: {r.stderr.strip()[:500]}'); continue
        if r.stderr.strip(): pg['warnings'] = r.stderr.strip()
    return pages

def check_page(pg):
    "Open a rendered page in Chromium and add what is wrong with it to pg['problems']"
    htmlf = pg['html']
    if not htmlf.exists(): return
    src = htmlf.read_text(encoding='utf-8')
    for s in re.findall(r'<img[^>]*\ssrc="([^"]+)"', src):
        if re.match(r'^(data|https?|file):', s): continue
        if not (htmlf.parent/html.unescape(s).split('#')[0]).exists(): pg['problems'].append(f'missing image file: {s}')
    r = probe_page(htmlf)
    if r is None: pg['problems'].append('page did not load in Chromium (no probe result)'); return
    pg['height'] = r['height']
    for s in r['brokenImages']: pg['problems'].append(f'image not loaded: {s}')
    for e in r['katexErrors']: pg['problems'].append(f'KaTeX could not render: {e}')
    for e in r['unrenderedMath']: pg['problems'].append(f'math not rendered: {e}')
    seen = {}
    for kind, ex in raw_tex(r['text']): seen.setdefault(kind, []).append(ex)
    for kind, exs in seen.items():
        pg['problems'].append(f'{kind} in visible text{f" ({len(exs)} places)" if len(exs) > 1 else ""}: "{exs[0]}"')
    if (r['errorOutputs'] or 'Traceback (most recent call last)' in r['preText']) and not any('traceback' in p for p in pg['problems']):
        pg['problems'].append('Python traceback shown on the page')
    for u in r['external']: pg['problems'].append(f'external request: {u}')
    if len(''.join(r['mainText'].split())) < 20 and not r['images']: pg['problems'].append('empty page (no text or images below the title)')
    for key, what in (('wideBlocks', 'code or output block wider than the column (it scrolls sideways)'),
                      ('wideTables', 'table wider than the column'), ('wideMath', 'display equation wider than the column')):
        ws = r.get(key, [])
        if ws: pg['problems'].append(f'{what}: {len(ws)} on the page, e.g. {ws[0]["px"]} px in {ws[0]["col"]} px: "{ws[0]["text"]}"')
    for t in r.get('inlineLists', [])[:3]:
        pg['problems'].append(f'list rendered inline (put a blank line before it): "{" ".join(t.split())[:80]}"')
    if len(r.get('inlineLists', [])) > 3: pg['problems'].append(f'... {len(r["inlineLists"]) - 3} more lists rendered inline')
    for im in r.get('imageSizes', []):
        f = htmlf.parent/html.unescape(im['src'] or '').split('#')[0]
        if im['src'] and not re.match(r'^(data|https?):', im['src']) and f.is_file():
            pg['problems'] += image_faults(im['src'], f.read_bytes(), im['shown'], im['natural'])

def link_faults(pages, whole_site:bool, site_url:str|None=None):
    """Links between pages that lead nowhere: a page that was not rendered (checked when the whole site is),
    or an anchor (`page.html#id`) that the target page does not have. Absolute links into the site itself
    (`site_url`, where nbdev points the names it links, e.g. `page.html#name`) are checked as the pages they name."""
    ids = {}
    for pg in pages:
        if pg['html'].exists():
            ids[pg['html'].name] = set(re.findall(r'\sid="([^"]+)"', pg['html'].read_text(encoding='utf-8')))
    for pg in pages:
        if not pg['html'].exists(): continue
        src = pg['html'].read_text(encoding='utf-8')
        m = re.search(r'<main id="content">(.*)</main>', src, re.S)   # the page's own links, not the sidebar's
        bad = []
        for href in re.findall(r'<a\s[^>]*href="([^"]+)"', m.group(1) if m else src):
            href = html.unescape(href)
            if site_url and href.startswith(site_url) and re.match(r'^[\w.-]+\.html(#|$)', href[len(site_url):]):
                href = href[len(site_url):]
            if re.match(r'^(https?|mailto|data|file|javascript):', href): continue
            page, _, frag = href.partition('#')
            if page and not page.endswith('.html'):   # a result file the page links to: it must be on the site
                f = pg['html'].parent/page.split('?')[0]
                if not f.is_file(): bad.append(f'{href} (no such file on the site' + (': a folder' if f.is_dir() else '') + ')')
                continue
            target = page or pg['html'].name
            if target not in ids:
                if whole_site: bad.append(f'{href} (no such page)')
                continue
            if frag and frag not in ids[target]: bad.append(f'{href} (no such anchor)')
        if bad: pg['problems'].append(f'broken link(s): {len(bad)}, e.g. ' + '; '.join(sorted(set(bad))[:3]))

def cmd_check(args):
    miss = tools_missing()
    if miss and args.install:
        print(f'docs: installing {" ".join(miss)} with apt-get')
        env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
        sudo = ['sudo', '-E'] if os.geteuid() != 0 and shutil.which('sudo') else []
        if subprocess.run([*sudo, 'apt-get', 'update', '-q'], env=env, stdout=subprocess.DEVNULL).returncode or \
           subprocess.run([*sudo, 'apt-get', 'install', '-y', '-q', *miss], env=env, stdout=subprocess.DEVNULL).returncode:
            print('docs: apt-get failed'); return 2
        miss = tools_missing()
    if miss:
        print(f'docs: missing tools for the offline docs check: {", ".join(miss)}\n'
              f'docs: install them with:  apt-get install -y {" ".join(APT_PKGS)}   (or run with --install)')
        return 2
    cfg = _cfg()
    out = Path(args.out).absolute()
    files = _notebooks(args.paths, cfg)
    if not files: print('docs: no notebooks found'); return 1
    shutil.rmtree(out, ignore_errors=True); out.mkdir(parents=True)
    shutil.copytree(KATEX_DIR, out/'_katex')  # local KaTeX (fonts too): no CDN
    roots = {Path(p) if Path(p).is_dir() else Path(p).parent for p in args.paths} or {cfg.nbs_path}
    for root in sorted(roots):  # images and styles the notebooks refer to, as proc_nbs copies them
        for f in root.rglob('*'):
            rel = f.relative_to(root)
            if f.is_file() and not any(p.startswith('.') or p in ('_proc', '_docs') for p in rel.parts) and \
               (f.suffix.lower() in IMG_EXTS or f.name == 'styles.css'):
                (out/rel).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, out/rel)
    for root in sorted(roots):  # result files the pages link to: the `resources` of _quarto.yml, as Quarto copies them
        for pat in _resources(cfg.nbs_path):
            for f in root.glob(pat):
                if f.is_file(): (out/f.relative_to(root)).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, out/f.relative_to(root))
    if not (out/'styles.css').exists():  # notebooks outside nbs/: use the site's stylesheet
        css = cfg.nbs_path/'styles.css'
        (out/'styles.css').write_text(css.read_text() if css.exists() else '')
    pages = render_pages(files, out, args.jobs)
    shots = []
    link_faults(pages, whole_site=not args.paths, site_url=cfg.doc_url if cfg.get('doc_host') else None)
    for pg in pages:
        check_page(pg)
        if pg['html'].exists() and (pg['nb'].stem == 'index' or pg['nb'].stem.startswith('00_')):
            png = out/f'screenshot-{pg["nb"].stem}.png'
            if screenshot(pg['html'], png, min(max(pg.get('height', 1600), 900), args.max_height)): shots.append(png)
            else: pg['problems'].append('screenshot failed')
    site = site_faults(cfg.nbs_path) if not args.paths else []  # the whole site only when checking all of nbs/
    ok = [p for p in pages if not p['problems']]
    def rel(p): return os.path.relpath(p, ROOT) if Path(p).is_relative_to(ROOT) else str(p)
    for pg in pages:
        print(f"{'ok  ' if not pg['problems'] else 'FAIL'}  {rel(pg['nb'])} -> {rel(pg['html'])}")
        for p in pg['problems']: print(f'        {p}')
        if pg.get('warnings') and args.verbose: print('        pandoc: ' + pg['warnings'].replace('\n', '\n        '))
    for s in shots: print(f'docs: screenshot {rel(s)}')
    for p in site: print(f'FAIL  site: {p}')
    print(f'docs: {len(ok)} pages ok, {len(pages) - len(ok)} failed' + (f'; {len(site)} site problem(s)' if site else ''))
    return 0 if len(ok) == len(pages) and not site else 1

# ---------------------------------------------------------------------------------------------
# 5. Self-test: scratch notebooks with known faults must be caught; a good one must pass

def _nb(*cells):
    def c(kind, src, outputs=None):
        d = dict(cell_type=kind, metadata={}, source=src)
        if kind == 'code': d.update(execution_count=None, outputs=outputs or [])
        return d
    return dict(cells=[c(*x) for x in cells], metadata={}, nbformat=4, nbformat_minor=5)

def _png(dpi=150, width=3):
    import io, matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(width, 2), dpi=dpi); ax.plot([0, 1, 2], [0, 1, 4]); ax.set_title('$y = x^2$')
    b = io.BytesIO(); fig.savefig(b, format='png'); plt.close(fig)
    return base64.b64encode(b.getvalue()).decode()

def cmd_selftest(args):
    miss = tools_missing()
    if miss: print(f'docs: selftest needs: apt-get install -y {" ".join(APT_PKGS)}'); return 2
    tab = '<table><tr><th>d</th><th>err</th></tr><tr><td>64</td><td>1e-7</td></tr></table>'
    cases = {
        'good': _nb(('markdown', '# Good page\n\n> A page that must pass, with $\\theta_i = b^{-2i/d}$'),
                    ('markdown', 'Inline $R_m^\\top R_n = R_{n-m}$ and display\n$$\\begin{pmatrix}\\cos\\theta & -\\sin\\theta\\\\ \\sin\\theta & \\cos\\theta\\end{pmatrix}$$\nand prices of $5 and $10 are not math.'),
                    ('code', '#| export\ndef double(x:int, # the input $x$\n          )->int: # $2x$\n    "Twice `x`"\n    return 2*x'),
                    ('markdown', 'A shown definition, then a list after a blank line:\n\n- one\n- two'),
                    ('code', '#| exports\ndef triple(x:int)->int: return 3*x'),
                    ('code', 'plot()', [dict(output_type='display_data', metadata={}, data={'image/png': _png(), 'text/plain': '<Figure>'})]),
                    ('code', 'table()', [dict(output_type='execute_result', execution_count=None, metadata={}, data={'text/html': tab, 'text/plain': 'table'})]),
                    ('code', 'sympy_expr', [dict(output_type='execute_result', execution_count=None, metadata={}, data={'text/latex': '$\\displaystyle \\frac{a}{b}$', 'text/plain': 'a/b'})]),
                    ('code', 'print("$$ in code output is fine")', [dict(output_type='stream', name='stdout', text='$$ \\frac{1}{2} in a printed string is fine\n')]),
                    ('markdown', 'The page ends on prose, as every page should.')),
        'raw_math_html': _nb(('markdown', '# Raw math in HTML\n\n> summary'), ('markdown', 'Some text to make the page non-empty.'),
                             ('code', 'df', [dict(output_type='execute_result', execution_count=None, metadata={}, data={'text/html': '<p>the score is $$x$$</p>', 'text/plain': 'x'})])),
        'raw_math_spaces': _nb(('markdown', '# Spaced dollars\n\n> summary'), ('markdown', 'Pandoc does not see math in $ \\theta_i $ with spaces.')),
        'traceback': _nb(('markdown', '# Traceback\n\n> summary'), ('markdown', 'Text before the failing cell.'),
                         ('code', '1/0', [dict(output_type='error', ename='ZeroDivisionError', evalue='division by zero',
                                               traceback=['\x1b[0;31mTraceback (most recent call last)\x1b[0m', 'ZeroDivisionError: division by zero'])])),
        'missing_image': _nb(('markdown', '# Missing image\n\n> summary'), ('markdown', 'A figure that is not there:\n\n![the plot](figs/nope.png)')),
        'empty': _nb(('markdown', '# Empty\n\n> summary')),
        'external': _nb(('markdown', '# External\n\n> summary'), ('markdown', 'An output that loads a script from a CDN.'),
                        ('code', 'widget', [dict(output_type='display_data', metadata={}, data={'text/html': '<script src="https://cdn.example.com/lib.js"></script><p>widget</p>', 'text/plain': 'w'})])),
        'bad_katex': _nb(('markdown', '# Bad KaTeX\n\n> summary'), ('markdown', 'A typo in math: $\\frac{a}{b$ and more words here.')),
    }
    def out(text, name=None):  # a text output: a stream if `name`, else a result's repr
        return [dict(output_type='stream', name=name, text=text)] if name else \
               [dict(output_type='execute_result', execution_count=None, metadata={}, data={'text/plain': text})]
    para = ('markdown', 'Some prose so that the page is not empty.')
    cases.update({
        'reader_words': _nb(('markdown', '# Words\n\n> summary'), ('markdown', 'As issue 6 asked, on this machine, see seed 000.'),
                            ('markdown', 'Timed at commit 3494bf3 in a scratch A/B with `BUDGET=300`.'),
                            ('markdown', '## Results\n\nPLACEHOLDER'),
                            ('code', 'print(path)', out('/tmp/tmpab12/results.json\n', 'stdout'))),
        'raw_repr': _nb(('markdown', '# Repr\n\n> summary'), para,
                        ('code', 'subprocess.run(cmd)', out("CompletedProcess(args=['rope-lit-lm'], returncode=0)"))),
        'http_log': _nb(('markdown', '# Log\n\n> summary'), para,
                        ('code', 'download()', out('127.0.0.1 - - [23/Nov/2026 05:17:25] "GET /train.en.gz HTTP/1.1" 200 -\n', 'stderr'))),
        'dict_dump': _nb(('markdown', '# Dict\n\n> summary'), para,
                         ('code', 'speeds', out("{'split': 1.52,\n 'interleaved': 1.08,\n 'threads': 2,\n 'shape': (1, 8, 512, 64)}"))),
        'low_dpi': _nb(('markdown', '# Low dpi\n\n> summary'), para,
                       ('code', 'plot()', [dict(output_type='display_data', metadata={}, data={'image/png': _png(dpi=60), 'text/plain': '<Figure>'})])),
        'shrunk_figure': _nb(('markdown', '# Shrunk\n\n> summary'), para,
                             ('code', 'plot()', [dict(output_type='display_data', metadata={}, data={'image/png': _png(width=24), 'text/plain': '<Figure>'})])),
        'hidden_exports': _nb(('markdown', '# Hidden code\n\n> summary'), para, ('code', '#| export\ndef f(x): return x')),
        'wide_code': _nb(('markdown', '# Wide code\n\n> summary'), para,
                         ('code', 'rows = run_benchmark(' + ', '.join(f'argument_{i}={i}' for i in range(12)) + ')')),
        'wide_table': _nb(('markdown', '# Wide table\n\n> summary'), para,
                          ('markdown', '| ' + ' | '.join(f'column_{i}' for i in range(12)) + ' |\n|' + '---|' * 12 + '\n| ' +
                           ' | '.join('123456.789012' for _ in range(12)) + ' |')),
        'wide_math': _nb(('markdown', '# Wide math\n\n> summary'), para,
                         ('markdown', '$$' + ' + '.join(f'\\cos(m\\theta_{{{i}}}) x_{{{i}}}' for i in range(24)) + '$$')),
        'inline_list': _nb(('markdown', '# Inline list\n\n> summary'), ('markdown', 'Training:\n- dropout\n- label smoothing')),
        'site_link': _nb(('markdown', '# Site link\n\n> summary'),
                         ('markdown', 'nbdev links names absolutely: [`helper`](https://rope-lit.github.io/rope_lit/good.html#helper).')),
        'shown_twice': _nb(('markdown', '# Shown twice\n\n> summary'), para,
                           ('code', 'def half(x:int)->float:\n    "Half of `x`"\n    return x/2'),
                           ('code', '#| eval: false\nshow_doc(half)', [dict(output_type='display_data', metadata={}, data={
                               'text/markdown': '---\n\n### half\n\n```python\ndef half(x:int)->float:\n```\n\n*Half of `x`*',
                               'text/plain': 'half'})])),
        'ends_on_code': _nb(('markdown', '# Ends on code\n\n> summary'), para, ('code', 'assert double(2) == 4')),
        'no_example': _nb(('markdown', '# No example\n\n> summary'), para, ('code', '#| exports\ndef quarter(x): return x/4'),
                          ('markdown', 'Another topic.'), ('markdown', 'And more prose.'), ('code', 'assert 1 + 1 == 2'),
                          ('code', '#| exports\ndef fifth(x): return x/5'), ('code', '#| echo: false\nprint(fifth(5))'),
                          ('markdown', 'The end.')),
        'big_outputs': _nb(('markdown', '# Big outputs\n\n> summary'), para,
                           *[('code', f'x{i}', [dict(output_type='execute_result', execution_count=None, metadata={},
                                                     data={'text/html': '<p>' + 'a' * 150_000 + '</p>',
                                                           'text/plain': 'x'})]) for i in range(4)],
                           ('markdown', 'The end.')),
        'broken_link': _nb(('markdown', '# Broken link\n\n> summary'),
                           ('markdown', 'See [the good page](00_good.ipynb#no-such-section), [a good one](00_good.ipynb) '
                                        'and [the results](results/missing.csv).')),
    })
    cases['00_good'] = cases.pop('good')  # a `00_` name, so it gets a screenshot like the derivation page
    expect = {'00_good': None, 'raw_math_html': 'raw $$', 'raw_math_spaces': 'raw $...$', 'traceback': 'traceback',
              'missing_image': 'image', 'empty': 'empty page', 'bad_katex': 'KaTeX', 'external': 'external request',
              'reader_words': ('internal work item', 'unnamed hardware', 'named by its file', 'absolute local path',
                               'process note', 'unfinished text'),
              'raw_repr': 'raw Python repr', 'http_log': ('HTTP server log', 'log on stderr'), 'dict_dump': 'dict/list repr',
              'low_dpi': 'below 150 dpi', 'shrunk_figure': 'shown at', 'hidden_exports': 'exported cells are hidden',
              'wide_code': 'block wider than the column', 'wide_table': 'table wider than the column',
              'wide_math': 'equation wider than the column', 'inline_list': 'list rendered inline',
              'broken_link': ('no such anchor', 'no such file'), 'shown_twice': 'function shown twice',
              'ends_on_code': 'page ends on code', 'big_outputs': 'over 500 KB',
              'no_example': 'no example or test right after it: 2, e.g. quarter; fifth',
              'site_link': 'good.html#helper (no such anchor)'}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d); nbs = d/'nbs'; nbs.mkdir()
        for k, nb in cases.items(): (nbs/f'{k}.ipynb').write_text(json.dumps(nb))
        out = Path(args.out).absolute() if args.out else d/'out'
        r = subprocess.run([sys.executable, __file__, 'check', '--out', str(out), '--jobs', '1', str(nbs)], capture_output=True, text=True, cwd=ROOT)
        print(r.stdout + r.stderr)
        res, cur = {}, None
        for l in r.stdout.splitlines():
            m = re.match(r'^(ok  |FAIL)  \S*?([\w]+)\.ipynb', l)
            if m: cur = m.group(2); res[cur] = [] if m.group(1) == 'ok  ' else ['FAIL']
            elif cur and l.startswith('        '): res[cur].append(l.strip())
        bad = []
        for k, want in expect.items():
            got = res.get(k)
            if got is None: bad.append(f'{k}: not reported')
            elif want is None and got: bad.append(f'{k}: should pass, got {got}')
            else:
                for w in ((want,) if isinstance(want, str) else want or ()):
                    if not any(w.lower() in p.lower() for p in got): bad.append(f'{k}: expected a problem containing {w!r}, got {got}')
        # README generator: deterministic and free of front matter / directives
        md1, _ = readme_offline(); md2, _ = readme_offline()
        if md1 != md2: bad.append('readme: two runs differ')
        if md1.startswith('---') or re.search(r'(?m)^(#\||output-file:)', md1): bad.append('readme: front matter or directives left in README')
        if not re.match(r'# .+\n\n> .+', md1): bad.append('readme: title and > summary not at the top')
        if not (pypi_faults('a $x^2$ b') and pypi_faults('see [a](b.md)')) or pypi_faults('$5 and $10; [a](https://x)'):
            bad.append('readme: the PyPI check misses raw LaTeX or a relative link, or flags prices and absolute links')
        if r.returncode != 1: bad.append(f'check should exit 1 on the faulty pages, exited {r.returncode}')
        # the site: a page outside the chapters, a chapter entry with no page, result files that are not pages
        site = d/'site'; site.mkdir()
        for n in ('index', 'a', 'b', 'c'): (site/f'{n}.ipynb').write_text(json.dumps(cases['00_good']))
        (site/'results').mkdir(); (site/'results'/'table.md').write_text('| a |\n|---|\n| 1 |\n')
        (site/'sidebar.yml').write_text('website:\n  sidebar:\n    contents:\n      - index.ipynb\n      - section: One\n'
                                        '        contents: [a.ipynb, gone.ipynb]\n      - section: Two\n        contents: [b.ipynb]\n')
        got = site_faults(site)
        for want in ('orphan page (rendered, but in no chapter of the sidebar): c.ipynb', 'sidebar entry with no page: gone.ipynb',
                     'orphan page (rendered, but in no chapter of the sidebar): results/table.md'):
            if want not in got: bad.append(f'site: expected {want!r}, got {got}')
        for want in ('no next/previous links',): 
            if not any(want in p for p in got): bad.append(f'site: expected {want!r}, got {got}')
        (site/'_quarto.yml').write_text('project:\n  render:\n    - "*.ipynb"\nwebsite:\n  page-navigation: true\n')
        got = site_faults(site)
        if any('table.md' in p for p in got): bad.append('site: a result file excluded by project.render still counted as a page')
        if any('next/previous' in p or 'markup' in p for p in got): bad.append(f'site: page-navigation on and plain titles, yet {got}')
        (site/'b.ipynb').write_text(json.dumps(_nb(('markdown', '# The `b` page, **bold**\n\n> summary'), para)))
        (site/'sidebar.yml').write_text((site/'sidebar.yml').read_text().replace('section: Two', 'section: "*Two*"'))
        (site/'index.ipynb').write_text(json.dumps(_nb(('markdown', '# Index\n\n> summary'),
                                                       ('markdown', 'Read [b](b.ipynb), then [a](a.ipynb); cite [a](a.ipynb#x).'))))
        if not any('another order than the sidebar' in p for p in site_faults(site)): bad.append('site: an index out of the sidebar order not caught')
        got = [p for p in site_faults(site) if 'markup' in p]
        if len(got) != 2 or not any('b.ipynb' in p for p in got): bad.append(f'site: expected markup in two sidebar titles, got {got}')
    n_checks = sum(1 if w is None or isinstance(w, str) else len(w) for w in expect.values()) + 11
    for b in bad: print(f'selftest: FAIL {b}')
    print(f'selftest: {n_checks - len(bad)} checks ok, {len(bad)} failed')
    return 1 if bad else 0

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest='cmd', required=True)
    r = sub.add_parser('readme', help='write README.md from nbs/index.ipynb')
    r.add_argument('--check', action='store_true', help='exit 1 if README.md differs from what would be written')
    r.add_argument('--engine', choices=['auto', 'offline', 'quarto'], default='auto',
                   help='auto: nbdev-readme when quarto is on PATH, else the offline generator')
    c = sub.add_parser('check', help='offline docs check: render every page and inspect it in headless Chromium')
    c.add_argument('paths', nargs='*', help='notebooks or folders (default: nbs/)')
    c.add_argument('--out', default='_offline_docs', help='output folder for the pages and screenshots')
    c.add_argument('--install', action='store_true', help=f'apt-get install -y {" ".join(APT_PKGS)} if missing (needs root)')
    c.add_argument('--jobs', type=int, default=2, help='notebooks processed at once')
    c.add_argument('--max-height', type=int, default=2400, help='tallest screenshot, in pixels')
    c.add_argument('--verbose', action='store_true', help='show pandoc warnings')
    t = sub.add_parser('selftest', help='check that the checker catches each fault it looks for, and passes a good page')
    t.add_argument('--out', default=None, help='keep the rendered scratch pages here (default: a temporary folder)')
    if sys.argv[1:2] == ['_proc']:  # internal: one notebook through nbdev's processing (see _proc_worker)
        process_nb(*sys.argv[2:4]); return
    args = ap.parse_args()
    if args.cmd == 'check':
        args.out = str(Path(args.out).absolute())
        args.paths = [str(Path(p).absolute()) for p in args.paths]
    sys.exit({'readme': cmd_readme, 'check': cmd_check, 'selftest': cmd_selftest}[args.cmd](args))

if __name__ == '__main__': main()
