// kg review console: the neighbourhood graph, drawn with cytoscape.js (vendored). No network
// but the console's own: the elements come embedded in the page (#graph-data) or from
// data-elements-url. The instance is window.cy (tests read it).
(function () {
  "use strict";

  var STYLE = [
    { selector: "node", style: {
        "label": "data(label)", "font-size": 11, "text-valign": "bottom", "text-margin-y": 4,
        "text-wrap": "ellipsis", "text-max-width": 140, "color": "#1d2330",
        "background-color": "#9db4e8", "border-width": 2, "border-color": "#5b6577",
        "width": 22, "height": 22 } },
    { selector: "node.seed", style: { "background-color": "#2357d9", "border-color": "#1d2330", "width": 30, "height": 30 } },
    { selector: "node.added", style: { "border-width": 5, "border-color": "#17692f", "background-color": "#e6f6ea" } },
    { selector: "node.changed", style: { "border-width": 5, "border-style": "dashed", "border-color": "#b45309",
                                         "background-color": "#fff5d6" } },
    { selector: "node.seed.added, node.seed.changed", style: { "background-color": "#2357d9" } },
    { selector: "edge", style: {
        "width": "data(width)", "line-color": "data(colour)", "target-arrow-color": "data(colour)",
        "target-arrow-shape": "triangle", "curve-style": "bezier", "arrow-scale": 0.9, "opacity": 0.9 } },
    { selector: "edge.added, edge.changed", style: { "line-style": "dashed", "line-dash-pattern": [8, 4] } },
    { selector: "node:selected", style: { "overlay-color": "#2357d9", "overlay-opacity": 0.15 } }
  ];

  function showError(text) {
    var box = document.getElementById("graph-error");
    if (!box) {
      box = document.createElement("div");
      box.id = "graph-error";
      box.className = "flash error";
      document.getElementById("graph").insertAdjacentElement("afterend", box);
    }
    box.textContent = text;
  }

  function draw(container, data) {
    var els = data.elements;
    var cy = window.cytoscape({
      container: container,
      elements: { nodes: els.nodes, edges: els.edges },
      style: STYLE,
      layout: els.nodes.length > 1
        ? { name: "concentric", concentric: function (n) { return 10 - n.data("hop"); },
            levelWidth: function () { return 1; }, minNodeSpacing: 40, padding: 40,
            animate: false }
        : { name: "grid" },
      wheelSensitivity: 0.3
    });
    if (cy.zoom() > 1.4) { cy.zoom(1.4); cy.center(); }  // a small graph: labels at a readable size
    cy.on("tap", "node", function (evt) {
      var href = evt.target.data("href");
      if (href) { window.location.assign(href); }
    });
    cy.on("mouseover", "node", function () { container.style.cursor = "pointer"; });
    cy.on("mouseout", "node", function () { container.style.cursor = ""; });
    window.cy = cy;
    cy.ready(function () { container.setAttribute("data-ready", "true"); });
  }

  function start() {
    var container = document.getElementById("graph");
    if (!container || !window.cytoscape) { return; }
    var embedded = document.getElementById("graph-data");
    if (embedded) {
      draw(container, JSON.parse(embedded.textContent));
      return;
    }
    var url = container.getAttribute("data-elements-url");
    if (!url) { return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("the graph could not be read (HTTP " + r.status + ")"); }
        return r.json();
      })
      .then(function (data) { draw(container, data); })
      .catch(function (err) { showError(String(err.message || err)); });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
