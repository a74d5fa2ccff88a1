// MathJax settings for pymdownx.arithmatex (generic mode): the math it marks, on every
// page, also after the theme's instant navigation loads a page; and a heading's math in
// the table of contents, where the toc extension copies its TeX unmarked (the theme puts
// each entry's text in a span of class md-ellipsis)
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex|md-ellipsis"
  }
};

if (typeof document$ !== "undefined") {
  document$.subscribe(() => {
    if (window.MathJax && MathJax.typesetPromise) {
      MathJax.startup.output.clearCache();
      MathJax.typesetClear();
      MathJax.texReset();
      MathJax.typesetPromise();
    }
  });
}
