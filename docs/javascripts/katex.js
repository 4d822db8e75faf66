// Renders the math that pymdownx.arithmatex (generic: true) leaves in a page: \( ... \) inline in
// span.arithmatex, \[ ... \] as a block in div.arithmatex. KaTeX is served from the site (assets/katex/).
// Only .arithmatex elements are rendered, so a dollar sign in prose or code is never taken for math; and the
// table of contents, whose entries repeat a heading's math as plain \( ... \) text.
// document$ is the theme's page observable: it fires on the first load and after each instant navigation.
document$.subscribe(function () {
  var options = {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false, // an expression KaTeX cannot parse is shown in red, the rest of the page renders
  };
  document.querySelectorAll(".arithmatex, .md-nav--secondary .md-nav__link").forEach(function (element) {
    renderMathInElement(element, options);
  });
});
