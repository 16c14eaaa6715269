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
    { selector: "edge.invalid", style: { "line-style": "dotted", "opacity": 0.45 } },
    { selector: "node:selected", style: { "overlay-color": "#2357d9", "overlay-opacity": 0.15 } }
  ];

  //: A graph with more nodes than this is drawn the cheap way: rings by hop packed closer, no
  //: overlap pass, straight edges instead of bundled bezier curves, labels only once zoomed in
  //: enough to read them, edges hidden and the canvas reused while panning or zooming.
  //: Measured on 168 nodes / 691 edges in Chromium (tests/ui/test_browser_graph_large.py): the
  //: concentric layout itself takes ~10 ms of the draw (breadthfirst several times more); the
  //: first frame (edges and labels) is most of it.
  var LARGE = 100;
  var LARGE_STYLE = [
    { selector: "node", style: { "min-zoomed-font-size": 9 } },
    { selector: "edge", style: { "curve-style": "straight", "arrow-scale": 0.7 } }
  ];

  function layoutFor(count) {
    if (count <= 1) { return { name: "grid" }; }
    return { name: "concentric", concentric: function (n) { return 10 - n.data("hop"); },  // rings by hop
             levelWidth: function () { return 1; }, minNodeSpacing: count > LARGE ? 12 : 40, padding: 40,
             avoidOverlap: count <= LARGE, animate: false };
  }

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
    var started = window.performance.now();
    var els = data.elements;
    var large = els.nodes.length > LARGE;
    var cy = window.cytoscape({
      container: container,
      elements: { nodes: els.nodes, edges: els.edges },
      style: large ? STYLE.concat(LARGE_STYLE) : STYLE,
      layout: layoutFor(els.nodes.length),
      hideEdgesOnViewport: large,
      textureOnViewport: large
    });
    if (cy.zoom() > 1.4) { cy.zoom(1.4); cy.center(); }  // a small graph: labels at a readable size
    cy.on("tap", "node", function (evt) {
      var href = evt.target.data("href");
      if (href) { window.location.assign(href); }
    });
    cy.on("mouseover", "node", function () { container.style.cursor = "pointer"; });
    cy.on("mouseout", "node", function () { container.style.cursor = ""; });
    window.cy = cy;
    cy.ready(function () {
      container.setAttribute("data-ready", "true");
      window.requestAnimationFrame(function () {  // the first frame drawn: how long the draw took
        container.setAttribute("data-draw-ms", String(Math.round(window.performance.now() - started)));
      });
    });
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

  window.kgGraph = { layoutFor: layoutFor, LARGE: LARGE };

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
