"""HTML renderer: one self-contained file (inline CSS, figures as base64 PNG, the interactive
timeline as inline SVG + script over embedded JSON; nothing from the network)."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable

import orjson

from analyzers.report.document import Block, Figure, Heading, Items, Paragraph, Table, Timeline
from mtia_trace.escape import script_json

_CSS = """
body{font:15px/1.5 -apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2330;
 max-width:1100px;margin:2em auto;padding:0 1.5em;background:#fff}
h1{font-size:1.7em;border-bottom:2px solid #3b6fd4;padding-bottom:.2em}
h2{font-size:1.3em;margin-top:1.8em;border-bottom:1px solid #d8dde6}
h3{font-size:1.1em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #d8dde6;padding:.25em .6em}
th{background:#eef2f9;text-align:left}
td.r{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#f8f9fc}
code{background:#f0f2f5;padding:0 .25em;border-radius:3px;font-size:.92em;overflow-wrap:anywhere}
.tw{overflow-x:auto;max-width:100%}
figure{margin:1.2em 0}
figure img{max-width:100%;border:1px solid #e2e6ee}
figcaption{color:#555;font-size:.9em}
.note{color:#666;font-style:italic;font-size:.88em}
.legend{color:#555;font-size:.82em;margin-top:-.3em}
.tlbox{position:relative;border:1px solid #e2e6ee;overflow:hidden}
.tlbox svg{width:100%;display:block;cursor:grab;user-select:none}
.tlbox .lab{font-size:10px;fill:#333}
.tip{position:absolute;display:none;background:#1d2330;color:#fff;font-size:12px;padding:2px 6px;
 border-radius:3px;pointer-events:none;white-space:nowrap}
ol li,ul li{margin:.25em 0}
"""


def _inline(text: str) -> str:
    """Escape, then translate the Markdown subset the builders use: **bold** and `code`."""
    out = html.escape(text, quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def _table(t: Table) -> str:
    align = t.align or ["l"] * len(t.columns)
    head = "".join(f"<th>{_inline(c)}</th>" for c in t.columns)
    body = "".join(
        "<tr>" + "".join(f'<td class="{a}">{_inline(c)}</td>' for c, a in zip(row, align)) + "</tr>"
        for row in t.rows)
    note = f'<p class="note">{_inline(t.note)}</p>' if t.note else ""
    if t.legend:
        note += f'<p class="legend">{_inline(t.legend)}</p>'
    return (f'<div class="tw"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
            f"</div>{note}")


#: The interactive timeline: SVG rectangles drawn from the embedded JSON; wheel zooms around the
#: pointer, drag pans, double-click resets, hovering shows the event. No libraries, no network.
#: The rectangles are made once; a zoom or pan moves them (at most once per animation frame),
#: it does not rebuild the SVG.
_TIMELINE_JS = """
(function(){
const box=document.currentScript.previousElementSibling;
const d=JSON.parse(box.querySelector('script[type="application/json"]').textContent);
const svg=box.querySelector('svg'),tip=box.querySelector('.tip'),NS='http://www.w3.org/2000/svg';
const W=1060,L=210,RH=16,H=d.rows.length*RH+28;
svg.setAttribute('viewBox','0 0 '+W+' '+H);svg.style.height=(H*0.9)+'px';
let x0=0,x1=Math.max(d.span,1e-9);const g=document.createElementNS(NS,'g');
d.rows.forEach(function(r,i){const t=document.createElementNS(NS,'text');t.setAttribute('x',L-6);
 t.setAttribute('y',i*RH+RH*0.72);t.setAttribute('text-anchor','end');t.setAttribute('class','lab');
 t.textContent=r;svg.appendChild(t);});
svg.appendChild(g);const ax=document.createElementNS(NS,'text');ax.setAttribute('x',L);
ax.setAttribute('y',H-8);ax.setAttribute('class','lab');svg.appendChild(ax);
function f(v){return (v/d.scale).toFixed(3)+' '+d.unit;}
const rs=[];for(let i=0;i<d.start.length;i++){const r=document.createElementNS(NS,'rect');
 const h=d.kind[i]==='host'?RH*0.5:RH*0.72;r.setAttribute('y',d.row[i]*RH+(RH-h)/2);
 r.setAttribute('height',h);r.setAttribute('fill',d.colors[d.kind[i]]||'#34495e');
 if(d.critical[i])r.setAttribute('stroke','#111');r.dataset.i=i;g.appendChild(r);rs.push(r);}
let queued=false;function redraw(){if(!queued){queued=true;requestAnimationFrame(function(){queued=false;draw();});}}
function draw(){const sc=(W-L)/(x1-x0);
 for(let i=0;i<rs.length;i++){const a=d.start[i],b=a+d.dur[i],r=rs[i];
  if(b<x0||a>x1){if(r.style.display!=='none')r.style.display='none';continue;}
  const s=Math.max(a,x0),e=Math.min(b,x1);r.style.display='';
  r.setAttribute('x',L+(s-x0)*sc);r.setAttribute('width',Math.max((e-s)*sc,0.6));}
 ax.textContent=f(x0)+' to '+f(x1)+' since the start of step '+d.step+
  ' (wheel: zoom, drag: pan, double-click: reset; outlined: on the critical path)';}
function at(ev){const p=svg.getBoundingClientRect();return x0+((ev.clientX-p.left)*W/p.width-L)*(x1-x0)/(W-L);}
svg.addEventListener('wheel',function(ev){ev.preventDefault();const c=at(ev),k=ev.deltaY>0?1.25:0.8;
 x0=c-(c-x0)*k;x1=c+(x1-c)*k;redraw();},{passive:false});
let drag=null;svg.addEventListener('mousedown',function(ev){drag=at(ev);});
window.addEventListener('mouseup',function(){drag=null;});
svg.addEventListener('mousemove',function(ev){if(drag!==null){const dx=drag-at(ev);x0+=dx;x1+=dx;redraw();}
 const i=ev.target.dataset?ev.target.dataset.i:undefined;
 if(i===undefined){tip.style.display='none';return;}
 tip.textContent=d.name[i]+' · '+d.kind[i]+' · '+f(d.dur[i])+' at '+f(d.start[i])+
  (d.critical[i]?' · critical':'');tip.style.display='block';
 tip.style.left=(ev.offsetX+12)+'px';tip.style.top=(ev.offsetY+12)+'px';});
svg.addEventListener('dblclick',function(){x0=0;x1=Math.max(d.span,1e-9);draw();});
draw();svg.setAttribute('data-ready','1');
})();
"""


def _timeline(t: Timeline) -> str:
    data = script_json(orjson.dumps(t.data).decode())
    return (f'<figure class="tl"><div class="tlbox"><svg role="img" aria-label="interactive '
            f'timeline"></svg><div class="tip"></div><script type="application/json">{data}'
            f"</script></div><script>{_TIMELINE_JS}</script>"
            f"<figcaption>{_inline(t.caption)}</figcaption></figure>")


def render_html(blocks: Iterable[Block], *, title: str) -> str:
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f"<h{b.level}>{_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            parts.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Items):
            tag = "ol" if b.ordered else "ul"
            parts.append(f"<{tag}>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + f"</{tag}>")
        elif isinstance(b, Table):
            parts.append(_table(b))
        elif isinstance(b, Timeline):
            parts.append(_timeline(b))
        elif isinstance(b, Figure):
            data = base64.b64encode(b.png).decode("ascii")
            alt = html.escape(b.alt or b.caption)
            parts.append(f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{_inline(b.caption)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
