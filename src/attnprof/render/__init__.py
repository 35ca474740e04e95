"""The render layer: one module per page, each turning a result into its template's context and nothing else
(:mod:`.report`: a result set's report; :mod:`.compare`: the comparison of result sets; a coming page, such as the
history of a run's result sets, gets a module of its own beside them), what the pages share (:mod:`.common`: the
jinja2 environment, its filters, the PDF), the plots (:mod:`.plots`, :mod:`.timeline_html`) and the print line
breaks (:mod:`.breaks`). Page 1's statements are made in attnprof.findings.brief. Imports attnprof.model,
attnprof.analysis and attnprof.findings."""
