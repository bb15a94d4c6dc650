"""The dashboard's one stylesheet, scoped to it (no external file, no font, no script).

Why each rule: the dashboard must fit the notebook's width (950 px in JupyterLab at
1400 px): nothing in it may be wider than its box, so the widgets' flex children get
``min-width: 0`` and every wide table scrolls in its own ``.tf-scroll`` box, its header
row and component column frozen (``position: sticky``). The header (status, verdict,
controls) sticks to the top of the output. Tab titles and control labels are never cut.
``.tf-states`` swaps a live state for "ended" when no refresh came for a while (see
``workbench._panels.status_html``), and at once when the widget has no kernel behind it:
ipywidgets marks the view of a model without a live comm ``jupyter-widgets-disconnected``,
which is what a notebook reopened from its saved widget state shows (a new kernel knows
nothing of the old models), and what a kernel restart leaves. ipywidgets then puts a
broken-link icon before every such view: the dashboard keeps only its own (its parts'
would be a dozen icons, and the status line already says "ended"), and its controls are
greyed out, since no kernel would act on them.
"""

from __future__ import annotations

CSS = """
.tupleflow-dashboard, .tupleflow-snapshot {max-width: 100%; min-width: 0; overflow-x: hidden;
  box-sizing: border-box}
.tupleflow-dashboard .jupyter-widget-html-content, .tupleflow-dashboard .widget-html-content
  {min-width: 0; max-width: 100%; line-height: 1.4}
.tupleflow-dashboard > * {min-width: 0; max-width: 100%}
.tupleflow-header {position: sticky; top: 0; z-index: 3; padding: 2px 0 4px;
  background: var(--jp-layout-color0, #fff); border-bottom: 1px solid #ddd}
.tupleflow-header .widget-label, .tupleflow-header label {width: auto !important}
.tupleflow-dashboard .lm-TabBar-tab {flex: 0 0 auto !important; min-width: max-content !important}
.tupleflow-dashboard .lm-TabBar-content {flex-wrap: wrap}
.tf-live, .tf-ended {display: inline-block; overflow: hidden; white-space: nowrap;
  vertical-align: bottom}
.tf-ended {max-width: 0; visibility: hidden;
  animation: tf-ended 0s linear var(--tf-stale, 5s) forwards}
.tf-live {animation: tf-live 0s linear var(--tf-stale, 5s) forwards}
@keyframes tf-ended {to {max-width: 100em; visibility: visible}}
@keyframes tf-live {to {max-width: 0; visibility: hidden}}
.tf-fades {animation: tf-fades 0s linear var(--tf-stale, 5s) forwards}
@keyframes tf-fades {to {opacity: 0.45}}
.jupyter-widgets-disconnected .tf-ended {animation: none; max-width: 100em; visibility: visible}
.jupyter-widgets-disconnected .tf-live {animation: none; max-width: 0; visibility: hidden}
.jupyter-widgets-disconnected .tf-fades {animation: none; opacity: 0.45}
.tupleflow-dashboard .jupyter-widgets-disconnected::before {content: none; display: none}
.tupleflow-controls.jupyter-widgets-disconnected {opacity: 0.45; pointer-events: none}
.tf-verdict {margin: 2px 0; white-space: normal}
.tf-level {color: #fff; border-radius: 3px; padding: 0 6px; font-weight: bold}
.tupleflow-graph svg, .tupleflow-snapshot svg {max-width: 100%; height: auto}
.tf-scroll {overflow: auto; max-width: 100%; max-height: 360px;
  border: 1px solid #ddd}
.tf-caption, .tf-table caption {text-align: left; font-weight: bold; font-size: 12px}
table.tf-table {border-collapse: separate; border-spacing: 0; font-size: 12px; margin: 4px 0}
.tf-table td, .tf-table th {border-right: 1px solid #ddd; border-bottom: 1px solid #ddd;
  padding: 2px 6px; text-align: right; white-space: nowrap; line-height: 1.3}
.tf-table td:first-child, .tf-table th:first-child {text-align: left}
.tf-table small.tf-unit {font-weight: normal; color: #666}
.tf-scroll tr:first-child th {position: sticky; top: 0; z-index: 1;
  background: var(--jp-layout-color1, #f7f7f7)}
.tf-scroll .tf-name, .tf-scroll tr:first-child th:first-child {position: sticky; left: 0;
  z-index: 2; background: var(--jp-layout-color1, #f7f7f7)}
.tf-table td.tf-na {color: #aaa}
tr.tf-restarted td {background: #fdecea}
.tf-message {font-size: 12px}
.tf-groups details summary {cursor: pointer}
"""




def style() -> str:
    """The stylesheet as a ``<style>`` element."""
    return f"<style>{CSS}</style>"
