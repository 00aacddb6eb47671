// Draws the Plotly figures whose JSON the page embeds in <script type="application/json"> blocks.
(function () {
  document.querySelectorAll("[data-plotly-figure]").forEach(function (target) {
    var data = document.getElementById(target.dataset.plotlyFigure);
    if (!data || !window.Plotly) { return; }
    var figure = JSON.parse(data.textContent);
    window.Plotly.newPlot(target, figure.data, figure.layout, {responsive: true, displaylogo: false});
  });
})();
